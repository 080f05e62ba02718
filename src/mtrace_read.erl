%% The readers' bodies, for both APIs (mtrace in Erlang, Mtrace in Elixir), run in the node that
%% records (bin/mtrace --node loads this module there): each asks the NIF, takes the node's own
%% steps (mtrace_node) and builds its result as maps (mtrace_sites). Options come validated, as
%% mtrace_options:validate/2 answers them. What keeps a reader from answering is raised as
%% error({mtrace, Why}), which each API words in its own language:
%%   {not_preloaded, HeapRefused}        the node does not record (HeapRefused: why glibc's heap
%%                                       was not walked either, or nil);
%%   {incomplete, Reason, HeapRefused}   leaks and why cannot tell lost blocks (c_src/nif/lost.c's refusal);
%%   {heap, Reason}                      heap/0 could not walk glibc's heap;
%%   {mark_of, Node}                     diff's mark is of another node.
-module(mtrace_read).

-export([olds/2, leaks/1, why/2, heap/0, top/2, mark/0, diff/2, stats/0, reset/0, attach/1,
         detach/0]).

%% Records are stamped by a coarse clock, which moves every few milliseconds.
-define(COARSE_TICK_MS, 5).

%% {Age in seconds, Size, Address, Microseconds spent naming it, Stack}, oldest first.
-spec olds(non_neg_integer(), map()) -> [tuple()].
olds(N, #{demangle := Demangle} = Opts) ->
    Filter = mtrace_options:filter(Opts),
    Limit = mtrace_options:no_limit(),
    case maps:get(function, Opts) of
        F when F =:= nil; is_binary(F) ->
            preloaded(mtrace_nif:olds_nif(min(N, Limit), Demangle, Filter));
        Regex ->
            Olds = preloaded(mtrace_nif:olds_nif(Limit, Demangle, Filter)),
            Pattern = mtrace_sites:pattern(Regex),
            Named = [O || {_, _, _, _, Stack} = O <- Olds,
                          lists:any(fun(Frame) -> named(Frame, Pattern) end, Stack)],
            lists:sublist(Named, min(N, Limit))
    end.

named({Library, Function}, Pattern) when Library =/= erlang, is_binary(Function) ->
    mtrace_sites:name_matches(Function, Pattern);
named(_, _) ->
    false.

%% {Sites, Info}: the lost sites, definite ones first, and what the mark did.
-spec leaks(map()) -> {[mtrace_sites:site()], map()}.
leaks(Opts) ->
    prepare_mark(Opts),
    Demangle = maps:get(demangle, Opts),
    {Blocks, Info, Whys} =
        case complete(mtrace_nif:leaks_nif(mtrace_options:filter(Opts), maps:get(why, Opts))) of
            {Bs, I} -> {Bs, I, #{}};
            {Bs, I, Pairs} -> {Bs, I, mtrace_sites:paths_by_id(Pairs, Demangle)}
        end,
    Sites = mtrace_sites:lost(Blocks, Whys, Opts),
    {mtrace_sites:by_certainty(mtrace_sites:by_size(mtrace_sites:matching_regex(Sites, Opts)),
                               maps:get(certainty, Opts)),
     Info}.

%% The chain of pointers that keeps the block at Address, nil when none does, or
%% {error, not_a_block}.
-spec why(non_neg_integer(), map()) -> mtrace_sites:path() | nil | {error, not_a_block}.
why(Address, Opts) ->
    prepare_mark(Opts),
    case complete(mtrace_nif:why_nif(Address)) of
        not_a_block -> {error, not_a_block};
        Chain -> hd(mtrace_sites:paths([Chain], maps:get(demangle, Opts)))
    end.

%% The node's own steps before a mark, in the node the mark reads.
prepare_mark(Opts) ->
    mtrace_node:prepare(maps:get(gc, Opts) =:= true).

%% glibc's heap, walked: its census.
-spec heap() -> map().
heap() ->
    case mtrace_nif:heap_nif() of
        {ok, Census} -> Census;
        {error, Reason} -> error({mtrace, {heap, Reason}})
    end.

%% The live heap's N largest sites.
-spec top(non_neg_integer(), map()) -> [mtrace_sites:site()].
top(N, Opts) ->
    Demangle = maps:get(demangle, Opts),
    {_Now, Rows} =
        preloaded(mtrace_nif:sites_nif(mtrace_options:filter(Opts), mtrace_options:no_limit())),
    Ids = [element(1, R) || R <- Rows],
    Stacks = mtrace_sites:stacks(Ids, Demangle),
    Whys = case maps:get(why, Opts) of
               true ->
                   prepare_mark(Opts),
                   mtrace_sites:paths_by_id(mtrace_nif:whys_nif(Ids), Demangle);
               false ->
                   #{}
           end,
    Estimated = estimated(),
    Sites = [mtrace_sites:site(#{bytes => Bytes, blocks => Blocks, oldest_age => Oldest / 1.0e9,
                                 stack => maps:get(Id, Stacks), estimated => Estimated,
                                 why => maps:get(Id, Whys, nil)})
             || {Id, Bytes, Blocks, _, _, Oldest} <- Rows],
    Grouped = mtrace_sites:group(mtrace_sites:matching_regex(Sites, Opts), maps:get(group, Opts),
                                 maps:get(library, Opts)),
    lists:sublist(mtrace_sites:by_size(Grouped), N).

%% A baseline of the live heap: #{node, time_ns, resets, sites => #{StackId => {Bytes, Blocks}}}.
-spec mark() -> map().
mark() ->
    {ok, Defaults} = mtrace_options:validate(top, []),
    {Now, Rows} =
        preloaded(mtrace_nif:sites_nif(mtrace_options:filter(Defaults), mtrace_options:no_limit())),
    Mark = #{node => node(), time_ns => Now, resets => maps:get(resets, mtrace_nif:stats_nif()),
             sites => maps:from_list([{Id, {Bytes, Blocks}} || {Id, Bytes, Blocks, _, _, _} <- Rows])},
    %% What the caller allocates next must fall after the mark's tick.
    timer:sleep(?COARSE_TICK_MS),
    Mark.

%% {Sites, ResetSince}: how the live heap changed since Mark, by site; ResetSince is true when
%% a reset ran since the mark (its blocks then read as freed).
-spec diff(map(), map()) -> {[mtrace_sites:site()], boolean()}.
diff(#{node := Node} = Mark, _Opts) when Node =/= node() ->
    error({mtrace, {mark_of, Node}}, [Mark]);
diff(#{time_ns := Time, resets := Resets, sites := Then}, Opts) ->
    Filter = mtrace_options:filter(Opts),
    {_Now, Rows} = preloaded(mtrace_nif:sites_nif(Filter, Time)),
    ResetSince = maps:get(resets, mtrace_nif:stats_nif()) =/= Resets,
    Now = maps:from_list([{Id, {B0, N0, B1, N1, Oldest}} || {Id, B0, N0, B1, N1, Oldest} <- Rows]),
    %% Now's rows passed the filter in C; the mark's stacks that hold nothing now pass it here.
    Ids = mtrace_nif:stacks_matching_nif(Filter,
                                         lists:usort(maps:keys(Now) ++ maps:keys(Then))),
    Stacks = mtrace_sites:stacks(Ids, maps:get(demangle, Opts)),
    Estimated = estimated(),
    Sites =
        [begin
             {B0, N0, B1, N1, Oldest} = maps:get(Id, Now, {0, 0, 0, 0, 0}),
             {Bm, Nm} = maps:get(Id, Then, {0, 0}),
             %% The net is exact; a block allocated in the mark's own tick counts as live at the
             %% mark (the records' clock cannot tell), so the parts are made to add up to it.
             {NetBytes, NetBlocks} = {B0 + B1 - Bm, N0 + N1 - Nm},
             {FreedBytes, FreedBlocks} = {max(Bm - B0, 0), max(Nm - N0, 0)},
             mtrace_sites:site(#{bytes => NetBytes, blocks => NetBlocks,
                                 allocated_bytes => NetBytes + FreedBytes,
                                 allocated_blocks => NetBlocks + FreedBlocks,
                                 freed_bytes => FreedBytes, freed_blocks => FreedBlocks,
                                 oldest_age => Oldest / 1.0e9, stack => maps:get(Id, Stacks),
                                 estimated => Estimated})
         end
         || Id <- Ids],
    Changed = [S || #{allocated_blocks := A, freed_blocks := F} = S <- Sites, A =/= 0 orelse F =/= 0],
    Grouped = mtrace_sites:group(mtrace_sites:matching_regex(Changed, Opts), maps:get(group, Opts),
                                 maps:get(library, Opts)),
    {mtrace_sites:by_size(Grouped), ResetSince}.

%% true when the node samples: the sites' figures are then estimates (nil: exact).
estimated() ->
    case maps:get(estimated, mtrace_nif:stats_nif()) of
        true -> true;
        _ -> nil
    end.

-spec stats() -> map().
stats() -> mtrace_node:stats().

%% How many records the table held.
-spec reset() -> non_neg_integer().
reset() -> preloaded(mtrace_nif:reset_nif()).

%% Variables: "MTRACE_NAME=value" strings (mtrace_options:variables/1).
-spec attach([binary()]) -> ok | {error, binary()}.
attach(Variables) -> mtrace_nif:attach_nif(Variables).

-spec detach() -> ok | {error, binary()}.
detach() -> mtrace_nif:detach_nif().

preloaded(not_preloaded) -> error({mtrace, {not_preloaded, nil}});
preloaded({not_preloaded, HeapRefused}) -> error({mtrace, {not_preloaded, HeapRefused}});
preloaded(Result) -> Result.

%% The answer of a reader that calls blocks lost (leaks, why), or the lost rule's refusal
%% (c_src/nif/lost.c's refusal()).
complete({error, Reason, HeapRefused}) -> error({mtrace, {incomplete, Reason, HeapRefused}});
complete(Result) -> preloaded(Result).
