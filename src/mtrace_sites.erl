%% Sites, frames and paths as maps, from what the NIF returns: stacks turned into frames once per
%% stack id, leaks' lost blocks into sites, chains of pointers into paths, the filters that need
%% names (a regular expression on functions), the grouping of top and diff, and the order. The
%% maps have the fields of Mtrace.Site, Mtrace.Frame and Mtrace.Path (all of them, so that
%% Elixir makes its structs of them as they are). Runs in the recording node: it calls the NIF.
-module(mtrace_sites).

-export([site/1, frame/1, stacks/2, erlang_frame/3, matching_regex/2, group/3, by_size/1,
         by_certainty/2, pattern/1, name_matches/2, lost/3, paths/2, paths_by_id/2]).

-export_type([site/0, frame/0, path/0]).

-type site() :: #{atom() => term()}.
-type frame() :: #{atom() => term()}.
-type path() :: #{root := map(), links := [map()]}.

%% A site with Fields, the others at their defaults (Mtrace.Site's).
-spec site(map()) -> site().
site(Fields) ->
    maps:merge(#{bytes => 0, blocks => 0, direct_blocks => 0, indirect_blocks => 0,
                 oldest_age => 0.0, stack => [], paths => [], allocated_bytes => nil,
                 allocated_blocks => nil, freed_bytes => nil, freed_blocks => nil,
                 address => nil, estimated => nil, contents => nil, scans => nil,
                 certainty => nil, possible_blocks => nil, rules => nil, holder => nil,
                 why => nil},
               Fields).

%% A frame with Fields, the others at their defaults (Mtrace.Frame's).
-spec frame(map()) -> frame().
frame(Fields) ->
    maps:merge(#{kind => native, library => nil, module => nil, function => nil, arity => nil,
                 address => 0, offset => nil, file => nil, line => nil, inlined => false,
                 unloaded => false},
               Fields).

%% The frames of each stack id (or {CodeAddress}), inlined functions expanded.
-spec stacks([term()], boolean()) -> #{term() => [frame()]}.
stacks(Ids, Demangle) ->
    Frames = [[stack_frame(F) || F <- Fs] || Fs <- mtrace_nif:frames_nif(Ids, Demangle)],
    maps:from_list(lists:zip(Ids, Frames)).

stack_frame({Address, _, Function, _, File, Line, _, Unloaded, true}) ->
    (erlang_frame(Address, Function, Unloaded))#{file := File, line := Line};
stack_frame({Address, Library, Function, Offset, File, Line, Inlined, Unloaded, false}) ->
    frame(#{library => Library, function => Function, address => Address, offset => Offset,
            file => File, line => Line, inlined => Inlined, unloaded => Unloaded}).

%% A JIT range's name, "'Mod':fun/arity" (atoms written as Erlang writes them), as a frame: the
%% MFA when it is one, else JIT code of the VM's own, named as it is.
-spec erlang_frame(non_neg_integer(), binary(), boolean() | 'maybe') -> frame().
erlang_frame(Address, Name, Unloaded) ->
    Frame = frame(#{kind => erlang, address => Address, function => Name, unloaded => Unloaded}),
    case erl_scan:string(unicode:characters_to_list(Name)) of
        {ok, [{atom, _, M}, {':', _}, {atom, _, F}, {'/', _}, {integer, _, A}], _} ->
            Frame#{module := M, function := F, arity := A};
        _ ->
            Frame
    end.

%% The sites with a native frame whose function a regular expression (the function option)
%% matches. The other stack filters are C's alone (filter.h), applied before a site is made.
-spec matching_regex([site()], map()) -> [site()].
matching_regex(Sites, #{function := Function}) when Function =/= nil, not is_binary(Function) ->
    Pattern = pattern(Function),
    [S || S <- Sites, lists:any(fun(F) -> native_match(F, Pattern) end, maps:get(stack, S))];
matching_regex(Sites, _Opts) ->
    Sites.

native_match(#{kind := native, function := Name}, Regex) when is_binary(Name) ->
    name_matches(Name, Regex);
native_match(_Frame, _Regex) ->
    false.

%% The function option's regular expression as this node's re runs it: re:compile/1's pattern,
%% or an Elixir Regex's, compiled again from its source when another PCRE compiled it (a node of
%% another OTP release).
-spec pattern(term()) -> term().
pattern(#{re_pattern := Pattern, source := Source} = Regex) ->
    case maps:get(re_version, Regex, nil) =:= {re:version(), erlang:system_info(endian)} of
        true ->
            Pattern;
        false ->
            {ok, Compiled} = re:compile(Source, compile_options(maps:get(opts, Regex, []))),
            Compiled
    end;
pattern(Pattern) ->
    Pattern.

%% A Regex's options: re's own (Elixir 1.15 on), or Elixir's letters.
compile_options(Options) when is_list(Options) ->
    Options;
compile_options(Letters) when is_binary(Letters) ->
    lists:append([letter(L) || <<L>> <= Letters]).

letter($i) -> [caseless];
letter($u) -> [unicode, ucp];
letter($m) -> [multiline];
letter($s) -> [dotall];
letter($x) -> [extended];
letter($f) -> [firstline];
letter($U) -> [ungreedy];
letter(_) -> [].

%% Whether Name matches Pattern (pattern/1's).
-spec name_matches(binary(), term()) -> boolean().
name_matches(Name, Pattern) -> re:run(Name, Pattern, [{capture, none}]) =:= match.

%% Sites merged by group: stack (as they are), {depth, K} (equal first K frames), function
%% (equal allocating function, its stacks kept as paths), erlang (equal nearest Erlang
%% function, its stacks kept as paths; a frame of its own when there is none). The allocating
%% function is the one that called the intercepted one; with a library (the library filter),
%% the first function in it: the user's own code rather than operator new or erts_sys_alloc.
-spec group([site()], stack | function | erlang | {depth, pos_integer()}, binary() | nil) ->
    [site()].
group(Sites, stack, _Library) ->
    Sites;
group(Sites, erlang, _Library) ->
    [begin
         Caller = case nearest_erlang(First) of
                      false -> frame(#{kind => erlang});
                      F -> F
                  end,
         (sum(Same))#{stack := [hd(maps:get(stack, First)), Caller], paths := by_size(Same)}
     end
     || [First | _] = Same <- group_by(fun(S) ->
                                               case nearest_erlang(S) of
                                                   false -> unknown;
                                                   #{module := M, function := F, arity := A} ->
                                                       {M, F, A}
                                               end
                                       end,
                                       Sites)];
group(Sites, {depth, K}, _Library) ->
    [(sum(Same))#{stack := lists:sublist(maps:get(stack, First), K)}
     || [First | _] = Same
            <- group_by(fun(S) ->
                                [maps:get(address, F) || F <- lists:sublist(maps:get(stack, S), K)]
                        end,
                        Sites)];
group(Sites, function, Library) ->
    [(sum(Same))#{stack := lists:sublist(maps:get(stack, First), allocating(First, Library) + 1),
                  paths := by_size(Same)}
     || [First | _] = Same <- group_by(fun(S) -> key(S, allocating(S, Library)) end, Sites)].

nearest_erlang(Site) ->
    case [F || #{kind := erlang, arity := A} = F <- maps:get(stack, Site), A =/= nil] of
        [F | _] -> F;
        [] -> false
    end.

%% The groups of Items by Key, each in the order of Items, in the order of their first item.
group_by(Key, Items) ->
    {Order, Groups} =
        lists:foldl(fun(I, {O, G}) ->
                            K = Key(I),
                            case G of
                                #{K := Same} -> {O, G#{K := [I | Same]}};
                                _ -> {[K | O], G#{K => [I]}}
                            end
                    end,
                    {[], #{}},
                    Items),
    [lists:reverse(maps:get(K, Groups)) || K <- lists:reverse(Order)].

%% The index of the allocating function's frame in the site's stack.
allocating(_Site, nil) ->
    1;
allocating(Site, Library) ->
    In = fun(#{library := L}) ->
                 is_binary(L) andalso (Library =:= <<>> orelse binary:match(L, Library) =/= nomatch)
         end,
    case lists:splitwith(fun(F) -> not In(F) end, tl_or_empty(maps:get(stack, Site))) of
        {Before, [_ | _]} -> length(Before) + 1;
        {_, []} -> 1
    end.

tl_or_empty([]) -> [];
tl_or_empty([_ | T]) -> T.

key(Site, I) ->
    case lists:nthtail(min(I, length(maps:get(stack, Site))), maps:get(stack, Site)) of
        [#{function := nil, address := A} | _] -> {address, A};
        [#{library := L, function := F} | _] -> {L, F};
        [] -> none
    end.

%% The merged site's why is its largest site's.
sum(Sites) ->
    #{why := Why} = hd(by_size(Sites)),
    lists:foldl(
      fun(S, Acc) ->
              Acc#{bytes := maps:get(bytes, Acc) + maps:get(bytes, S),
                   blocks := maps:get(blocks, Acc) + maps:get(blocks, S),
                   direct_blocks := maps:get(direct_blocks, Acc) + maps:get(direct_blocks, S),
                   indirect_blocks := maps:get(indirect_blocks, Acc) + maps:get(indirect_blocks, S),
                   oldest_age := max(maps:get(oldest_age, Acc), known(maps:get(oldest_age, S))),
                   allocated_bytes := add(allocated_bytes, Acc, S),
                   allocated_blocks := add(allocated_blocks, Acc, S),
                   freed_bytes := add(freed_bytes, Acc, S),
                   freed_blocks := add(freed_blocks, Acc, S),
                   estimated := either(maps:get(estimated, Acc), maps:get(estimated, S)),
                   scans := max_known(maps:get(scans, Acc), maps:get(scans, S))}
      end,
      site(#{why => Why}),
      Sites).

known(nil) -> 0.0;
known(N) -> N.

either(nil, B) -> B;
either(false, B) -> B;
either(A, _) -> A.

max_known(nil, B) -> B;
max_known(A, nil) -> A;
max_known(A, B) -> max(A, B).

add(K, A, B) ->
    case {maps:get(K, A), maps:get(K, B)} of
        {nil, Y} -> Y;
        {X, nil} -> X;
        {X, Y} -> X + Y
    end.

%% Largest bytes first; then more blocks, then older.
-spec by_size([site()]) -> [site()].
by_size(Sites) ->
    Key = fun(#{bytes := B, blocks := N, oldest_age := Age}) -> {-B, -N, -known(Age)} end,
    [S || {_, _, S} <- lists:sort([{Key(S), I, S} || {I, S} <- lists:enumerate(Sites)])].

%% Lost sites, definite ones first, each group in the order given; only those of one certainty
%% when Certainty is definite or possible, all when nil.
-spec by_certainty([site()], definite | possible | nil) -> [site()].
by_certainty(Sites, nil) ->
    [S || #{certainty := definite} = S <- Sites]
    ++ [S || #{certainty := C} = S <- Sites, C =/= definite];
by_certainty(Sites, Certainty) ->
    [S || #{certainty := C} = S <- Sites, C =:= Certainty].

%% leaks' sites from the lost blocks {Address, Size, AgeNs, StackId, Direct, Scans, Certainty}
%% of c_src/nif/lost.c's leaks: grouped by stack; blocks known from glibc's heap alone (stack and scans
%% nil, and what they hold in the age's place) grouped by usable size and what they hold.
%% Certainty: nil when the block is lost definitely, {Rule, Holder} when a word a rule
%% discounted points into it. Whys: each stack's chain, given to its site; with blocks, one site
%% a block, given the chain only when it ends at that block.
-spec lost([tuple()], #{term() => path() | nil}, map()) -> [site()].
lost(Blocks, Whys, Opts) ->
    Ids = uniq([Id || {_, _, _, Id, _, _, _} <- Blocks, Id =/= nil]),
    Stacks = stacks(Ids, maps:get(demangle, Opts)),
    case maps:get(blocks, Opts, false) of
        true ->
            [begin
                 Why = case maps:get(Id, Whys, nil) of
                           #{links := [_ | _] = Links} = Path ->
                               case lists:last(Links) of
                                   #{address := Address} -> Path;
                                   _ -> nil
                               end;
                           _ ->
                               nil
                       end,
                 (lost_site([B], Stacks))#{address := Address, why := Why}
             end
             || {Address, _, _, Id, _, _, _} = B <- Blocks];
        false ->
            [(lost_site(Same, Stacks))#{why := maps:get(Id, Whys, nil)}
             || [{_, _, _, Id, _, _, _} | _] = Same
                    <- group_by(fun({_, Size, _, nil, _, _, _} = B) -> {unrecorded, Size, holds(B)};
                                   ({_, _, _, Id, _, _, _}) -> Id
                                end,
                                Blocks)]
    end.

uniq(List) ->
    lists:reverse(element(1, lists:foldl(fun(X, {Acc, Seen}) ->
                                                 case maps:is_key(X, Seen) of
                                                     true -> {Acc, Seen};
                                                     false -> {[X | Acc], Seen#{X => true}}
                                                 end
                                         end,
                                         {[], #{}},
                                         List))).

holds({_, _, {cxx, Class}, nil, _, _, _}) -> {cxx, Class};
holds({_, _, {Kind, _}, nil, _, _, _}) when Kind =:= erlang_binary; Kind =:= erlang_resource -> Kind;
holds({_, _, {string, _}, nil, _, _, _}) -> string;
holds(_) -> nil.

lost_site([{_, Size, What, Id, _, Scans, _} | _] = Blocks, Stacks) ->
    Direct = length([B || B <- Blocks, element(5, B)]),
    Possible = [{Rule, Holder} || {_, _, _, _, _, _, {Rule, Holder}} <- Blocks],
    Site0 = site(#{bytes => lists:sum([element(2, B) || B <- Blocks]),
                   blocks => length(Blocks),
                   direct_blocks => Direct,
                   indirect_blocks => length(Blocks) - Direct,
                   certainty => case Possible of [] -> definite; _ -> possible end}),
    Site = case Possible of
               [] ->
                   Site0;
               [{_, Holder} | _] ->
                   Site0#{possible_blocks := length(Possible),
                          rules := lists:usort([R || {R, _} <- Possible]),
                          holder := Holder}
           end,
    case Id of
        nil ->
            Site#{oldest_age := nil, contents := contents(Size, What)};
        _ ->
            Site#{oldest_age := lists:max([element(3, B) || B <- Blocks]) / 1.0e9,
                  stack := maps:get(Id, Stacks),
                  scans := Scans}
    end.

contents(Size, {cxx, Class}) ->
    unicode:characters_to_binary(
      io_lib:format("~b-byte ~ts objects (C++, by their vtable) without a record", [Size, Class]));
contents(Size, {erlang_binary, _}) ->
    unicode:characters_to_binary(
      io_lib:format("~b-byte Erlang binaries (off-heap, by their header) without a record",
                    [Size]));
contents(Size, {erlang_resource, _}) ->
    unicode:characters_to_binary(
      io_lib:format("~b-byte Erlang resources (magic binaries, by their header) without a record",
                    [Size]));
contents(Size, {string, Text}) ->
    unicode:characters_to_binary(io_lib:format("~b-byte strings without a record, such as ~ts",
                                   [Size, io_lib:write_string(binary_to_list(Text))]));
contents(Size, _) ->
    unicode:characters_to_binary(io_lib:format("~b-byte blocks without a record", [Size])).

%% The NIF's chains ({Root, Links}, or nil) as paths, their stacks and the code of their stack
%% roots' frames named at once.
-spec paths([tuple() | nil], boolean()) -> [path() | nil].
paths(Chains, Demangle) ->
    Ids = uniq([Id || {_, Links} <- Chains, {_, _, Id, _} <- Links, Id =/= nil]),
    Code = uniq([{At} || {{stack, _, _, _, {_, At}}, _} <- Chains]),
    Stacks = stacks(Ids ++ Code, Demangle),
    [case Chain of
         nil ->
             nil;
         {Root, Links} ->
             #{root => root(Root, Stacks),
               links => [#{address => A, size => Size, offset => Offset,
                           stack => maps:get(Id, Stacks, [])}
                         || {A, Size, Id, Offset} <- Links]}
     end
     || Chain <- Chains].

root({stack, Via, {Tid, Name}, Offset, Code}, Stacks) ->
    Frame = case Code =/= nil andalso maps:get({element(2, Code)}, Stacks, nil) of
                [Innermost | _] -> Innermost#{address := element(1, Code)};
                _ -> nil
            end,
    #{kind => stack, address => Via, thread => Tid, thread_name => Name, offset => Offset,
      frame => Frame};
root({static, Via, Library, Name, Offset}, _) ->
    #{kind => static, address => Via, library => Library, name => Name, offset => Offset};
root({tls, Via, {Tid, Name}, Library, Offset}, _) ->
    #{kind => tls, address => Via, thread => Tid, thread_name => Name, library => Library,
      offset => Offset};
root({register, {Tid, Name}, Register}, _) ->
    #{kind => register, thread => Tid, thread_name => Name, register => Register};
root({altstack, {Tid, Name}}, _) ->
    #{kind => altstack, thread => Tid, thread_name => Name};
root({lost}, _) ->
    #{kind => lost};
root({discounted, Rule, Holder}, _) ->
    #{kind => discounted, rule => Rule, address => Holder};
root({mapping, Via, Lo, Hi, <<>>, Allocator}, _) ->
    maps:merge(#{kind => vm, address => Via, name => nil, allocator => Allocator},
               mapping_place(Via, Lo, Hi));
root({mapping, Via, Lo, Hi, Name, _}, _) ->
    maps:merge(#{kind => other, address => Via, name => Name}, mapping_place(Via, Lo, Hi)).

mapping_place(_Via, nil, _Hi) -> #{offset => nil, mapping => nil};
mapping_place(Via, Lo, Hi) -> #{offset => Via - Lo, mapping => {Lo, Hi}}.

%% [{StackId, Chain | nil}] as a map of paths (or nil) by stack id.
-spec paths_by_id([{non_neg_integer(), tuple() | nil}], boolean()) ->
    #{non_neg_integer() => path() | nil}.
paths_by_id(Pairs, Demangle) ->
    maps:from_list(lists:zip([Id || {Id, _} <- Pairs],
                             paths([Chain || {_, Chain} <- Pairs], Demangle))).
