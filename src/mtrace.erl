%% mtrace for Erlang: the readers of the live heap and of lost blocks, in a node with or without
%% Elixir. Results are maps and lists (a site, a frame and a path have the fields of Elixir's
%% Mtrace.Site, Mtrace.Frame and Mtrace.Path, documented in docs/results.md); options are a list
%% of {Key, Value} (a bare atom is {Atom, true}) or a map, with the keys and defaults of Elixir's
%% Mtrace (docs/erlang.md lists them); text options take strings or binaries.
%%
%% The readers' bodies are mtrace_read's, which Elixir's Mtrace calls too. A bad argument raises
%% badarg, whose sentence the shell prints (format_error/2); a reader that cannot answer raises
%% error({mtrace, Why}) with its sentence alike.
%%
%%   1> mtrace:print(mtrace:leaks()).
%%   2> mtrace:top(5, #{library => "my_nif"}).
%%   3> mtrace:attach().          % a node started without the preload
-module(mtrace).

-export([leaks/0, leaks/1, top/1, top/2, why/1, why/2, olds/1, olds/2, stats/0, reset/0,
         heap/0, attach/0, attach/1, detach/0, mark/0, diff/1, diff/2, write/2, write/3,
         print/1, format_error/2]).

%% The lost blocks by call site, largest first, definite ones first (docs/rules.md).
-spec leaks() -> [map()].
leaks() -> leaks([]).

-spec leaks(list() | map()) -> [map()].
leaks(Opts) -> lost(Opts, {leaks, 1}, [Opts]).

lost(Opts, Name, Args) ->
    {Sites, _Info} = read(leaks, [options(leaks, Name, Opts, Args)]),
    Sites.

%% The N largest call sites of the live heap.
-spec top(non_neg_integer()) -> [map()].
top(N) -> top(N, []).

-spec top(non_neg_integer(), list() | map()) -> [map()].
top(N, Opts) ->
    count(N, n, {top, 2}, [N, Opts]),
    live(N, Opts, {top, 2}, [N, Opts]).

live(N, Opts, Name, Args) -> read(top, [N, options(top, Name, Opts, Args)]).

%% Why the live block at Address is kept: the shortest chain of pointers from a root to it, nil
%% when none holds it, {error, not_a_block} when no live block holds Address.
-spec why(non_neg_integer()) -> map() | nil | {error, not_a_block}.
why(Address) -> why(Address, []).

-spec why(non_neg_integer(), list() | map()) -> map() | nil | {error, not_a_block}.
why(Address, Opts) ->
    count(Address, address, {why, 2}, [Address, Opts]),
    read(why, [Address, options(why, {why, 2}, Opts, [Address, Opts])]).

%% The N oldest live blocks: {AgeSeconds, Size, Address, MicrosecondsNaming, Stack}, Stack a list
%% of {Library, Function | nil} or {erlang, Name}. Opts: true or false (demangle), or options.
-spec olds(non_neg_integer()) -> [tuple()].
olds(N) -> olds(N, false).

-spec olds(non_neg_integer(), boolean() | list() | map()) -> [tuple()].
olds(N, Demangle) when is_boolean(Demangle) ->
    olds(N, [{demangle, Demangle}]);
olds(N, Opts) ->
    count(N, n, {olds, 2}, [N, Opts]),
    read(olds, [N, options(olds, {olds, 2}, Opts, [N, Opts])]).

%% The recording's counters, glibc's mallinfo2 and the node's own (mtrace_node:stats/0).
-spec stats() -> map().
stats() -> read(stats, []).

%% Empties the table of live allocations: how many records it held.
-spec reset() -> non_neg_integer().
reset() -> read(reset, []).

%% glibc's heap, walked: its census.
-spec heap() -> map().
heap() -> read(heap, []).

%% Starts recording in this node, started without the preload. Opts: the recording's MTRACE_*
%% variables in lowercase (depth, unwind, sample, ...), fixed at the first attach.
-spec attach() -> ok | {error, binary()}.
attach() -> attach([]).

-spec attach(list() | map()) -> ok | {error, binary()}.
attach(Opts) ->
    Variables = mtrace_options:variables(options(attach, {attach, 1}, Opts, [Opts])),
    case Variables =/= [] andalso lists:member(maps:get(attach, stats()), [attached, detached]) of
        true ->
            {error, <<"the recording's options are fixed when mtrace first records in a node; "
                      "call mtrace:attach() without options">>};
        false ->
            read(attach, [Variables])
    end.

%% Stops recording in a node that attach/1 attached to.
-spec detach() -> ok | {error, binary()}.
detach() -> read(detach, []).

%% A baseline of the live heap for diff/1,2 and the since option.
-spec mark() -> map().
mark() -> read(mark, []).

%% How the live heap changed since Mark, by call site, largest growth first.
-spec diff(map()) -> [map()].
diff(Mark) -> diff(Mark, []).

-spec diff(map(), list() | map()) -> [map()].
diff(Mark, Opts) -> changed(Mark, Opts, {diff, 2}, [Mark, Opts]).

changed(#{node := Node, time_ns := Time, resets := Resets, sites := Then} = Mark, Opts, Name, Args)
  when is_atom(Node), is_integer(Time), is_integer(Resets), is_map(Then) ->
    {Sites, ResetSince} = read(diff, [Mark, options(diff, Name, Opts, Args)]),
    ResetSince andalso logger:warning("mtrace:diff/2: mtrace:reset/0 ran since the mark; "
                                      "its blocks read as freed"),
    Sites;
changed(Mark, _Opts, Name, Args) ->
    badarg(Name, Args, ["expected a mark (mtrace:mark/0), got: ", write(Mark)]).

%% Writes the live heap's sites (what: live, the default), the lost ones (what: leaks) or a
%% diff's ({diff, Mark}) to Path as a text report (the format of the exit report). The other
%% formats (html, pprof, folded, ...) are Elixir's: Mtrace.write/3.
-spec write(file:name_all(), text) -> ok | {error, file:posix()}.
write(Path, Format) -> write(Path, Format, []).

-spec write(file:name_all(), text, list() | map()) -> ok | {error, file:posix()}.
write(Path, text, Opts) ->
    Args = [Path, text, Opts],
    {What, Rest} = what(Opts),
    Sites = case What of
                live -> live(mtrace_options:no_limit(), Rest, {write, 3}, Args);
                leaks -> lost(Rest, {write, 3}, Args);
                {diff, Mark} -> changed(Mark, Rest, {write, 3}, Args);
                Other ->
                    badarg({write, 3}, Args,
                           ["what must be live, leaks or {diff, Mark}, got: ", write(Other)])
            end,
    file:write_file(Path, mtrace_text:render(Sites, #{what => report_of(What)}));
write(Path, Format, Opts) ->
    badarg({write, 3}, [Path, Format, Opts],
           ["format must be text (the other formats are Elixir's: Mtrace.write/3), got: ",
            write(Format)]).

%% write/3's what option, and the reader's options without it (which the reader checks).
what(Opts) when is_map(Opts) ->
    {maps:get(what, Opts, live), maps:remove(what, Opts)};
%% length/1 fails the guard of an improper list, which lists:keytake/3 cannot take.
what(Opts) when length(Opts) >= 0 ->
    case lists:keytake(what, 1, Opts) of
        {value, {what, What}, Rest} -> {What, Rest};
        false -> {live, Opts}
    end;
what(Opts) ->
    {live, Opts}.

report_of(leaks) -> leaks;
report_of(_) -> live.

%% Prints a result readably: sites (of leaks/0,1, top/1,2, diff/1,2) as the exit report prints
%% them, a path one step a line, anything else as the shell would.
-spec print(term()) -> ok.
print([#{blocks := _, stack := _} | _] = Sites) ->
    Lost = lists:any(fun(#{direct_blocks := D, indirect_blocks := I}) -> D + I > 0 end, Sites),
    io:put_chars(mtrace_text:render(Sites, #{what => case Lost of true -> leaks; false -> live end,
                                             title => title()}));
print(#{root := Root, links := Links}) ->
    io:put_chars([root(Root), "\n", [step(L) || L <- Links]]);
print(Term) ->
    io:format("~tp~n", [Term]).

title() ->
    io_lib:format("~ts, pid ~ts, on request", [node(), os:getpid()]).

root(#{kind := Kind} = Root) ->
    ["root: ", atom_to_list(Kind),
     [io_lib:format(" ~ts=~tp", [K, V]) || {K, V} <- lists:sort(maps:to_list(Root)), K =/= kind,
                                            K =/= frame, V =/= nil]].

step(#{address := A, size := Size, offset := Offset, stack := Stack}) ->
    Site = case Stack of
               [_, #{function := F} | _] when F =/= nil -> [" ", frame_name(hd(tl(Stack)))];
               _ -> []
           end,
    ["  -> 0x", string:lowercase(integer_to_list(A, 16)), io_lib:format(" (~b B", [Size]), Site, ")",
     case Offset of nil -> []; _ -> io_lib:format(" +~b", [Offset]) end, "\n"].

frame_name(#{kind := erlang, module := M, function := F, arity := A}) when M =/= nil ->
    io_lib:format("~tw:~tw/~b", [M, F, A]);
frame_name(#{function := F}) ->
    io_lib:format("~ts", [F]).

%% The sentence the shell prints under a bad argument or a reader's refusal.
-spec format_error(term(), erlang:stacktrace()) -> map().
format_error(_Reason, [{_, _, _, Info} | _]) ->
    case proplists:get_value(error_info, Info) of
        #{cause := Sentence} -> #{general => Sentence};
        _ -> #{}
    end.

%% A reader of mtrace_read, its refusal raised with its sentence.
read(Fun, Args) ->
    try
        apply(mtrace_read, Fun, Args)
    catch
        error:{mtrace, Why} ->
            erlang:error({mtrace, Why}, none,
                         [{error_info, #{module => ?MODULE, cause => refusal(Why)}}])
    end.

refusal({not_preloaded, HeapRefused}) ->
    ["mtrace does not record in this node (", atom_to_list(node()),
     "): call mtrace:attach() (no restart), or start it with LD_PRELOAD=", library(),
     heap_refused(HeapRefused)];
refusal({incomplete, Reason, HeapRefused}) ->
    ["mtrace:leaks/1 needs every live block recorded, and ", incomplete(Reason),
     heap_refused(HeapRefused)];
refusal({heap, Reason}) ->
    ["glibc's heap could not be walked: ", Reason];
refusal({mark_of, Node}) ->
    ["mtrace:diff/2: the mark is of ", atom_to_list(Node), ", not of ", atom_to_list(node())].

incomplete(sampling) ->
    "MTRACE_SAMPLE records one in many: start the node without MTRACE_SAMPLE";
incomplete({dropped, N}) ->
    io_lib:format("~b allocations found no room in the table: start the node with a larger "
                  "MTRACE_SLOTS_MAX", [N]);
incomplete(reset) ->
    "mtrace:reset/0 forgot the records of the blocks live when it ran: restart the node to look "
    "for leaks";
incomplete(attached) ->
    "mtrace was attached to this node while it ran: the blocks allocated before have no record. "
    "mtrace:top/2 and mtrace:olds/2 show what was allocated since".

heap_refused(nil) -> "";
heap_refused(Why) -> [" (glibc's heap, which would tell the blocks without a record, could not "
                      "be walked: ", Why, ")"].

library() ->
    case code:priv_dir(mtrace) of
        {error, _} -> "mtrace.so";
        Dir -> filename:join(Dir, "mtrace.so")
    end.

%% Opts validated for Reader: a map of every option. Name is {Function, Arity} for the sentence.
options(Reader, Name, Opts, Args) ->
    Pairs = case Opts of
                M when is_map(M) -> unfold(maps:to_list(M));
                L -> unfold(L)
            end,
    case [K || K <- keys(Pairs), K =:= nodes orelse K =:= timeout] of
        [K | _] ->
            badarg(Name, Args,
                   [atom_to_list(K), " is for Elixir's Mtrace; in Erlang, call mtrace on each node "
                    "with erpc:multicall/4"]);
        [] ->
            case mtrace_options:validate(Reader, Pairs) of
                {ok, Valid} -> Valid;
                {error, Error} -> badarg(Name, Args, mtrace_options:message(Reader, Error, erlang))
            end
    end.

%% The keys of a list's pairs; an improper list's tail is left to validate/2 to refuse.
keys([{K, _} | T]) -> [K | keys(T)];
keys([_ | T]) -> keys(T);
keys(_) -> [].

%% A bare atom as {Atom, true}, a text option's string as a binary; any tail left as it is.
unfold([Key | T]) when is_atom(Key) ->
    [{Key, true} | unfold(T)];
unfold([{Key, Text} | T]) when Key =:= library; Key =:= function; Key =:= erlang; Key =:= title ->
    Pair = case is_list(Text) andalso io_lib:printable_unicode_list(Text) of
               true -> {Key, unicode:characters_to_binary(Text)};
               false -> {Key, Text}
           end,
    [Pair | unfold(T)];
unfold([Pair | T]) ->
    [Pair | unfold(T)];
unfold(Tail) ->
    Tail.

count(N, _What, _Name, _Args) when is_integer(N), N >= 0 ->
    ok;
count(N, What, Name, Args) ->
    badarg(Name, Args, [atom_to_list(What), " must be a non-negative integer, got: ", write(N)]).

%% badarg, raised as by Function itself (called with Args): the shell names it, and prints the
%% sentence under it (format_error/2).
badarg({Function, Arity}, Args, Sentence) ->
    Cause = unicode:characters_to_binary(
              io_lib:format("mtrace:~ts/~b: ~ts", [Function, Arity, Sentence])),
    {current_stacktrace, Stack} = process_info(self(), current_stacktrace),
    Callers = lists:dropwhile(fun(Frame) -> element(1, Frame) =:= ?MODULE end, Stack),
    erlang:raise(error, badarg,
                 [{?MODULE, Function, Args, [{error_info, #{module => ?MODULE, cause => Cause}}]}
                  | Callers]).

write(Term) -> io_lib:format("~tp", [Term]).
