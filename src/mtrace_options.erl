%% The readers' options, declared once for both APIs (mtrace in Erlang, Mtrace in Elixir): which
%% reader takes which, their defaults, and one check per option. validate/2 answers a map, or
%% what is wrong; message/3 words that in the caller's language, which writes the values (an
%% atom is stack in Erlang, :stack in Elixir). The filters become here the one term the NIF reads
%% (c_src/nif/filter.h). Pure functions: they run in any node, with or without Elixir.
-module(mtrace_options).

-export([validate/2, message/3, filter/1, variables/1, ns/1, no_limit/0]).

-export_type([reader/0, error/0]).

-type reader() :: olds | leaks | top | diff | mark | why | stats | watch | render | attach.
-type error() :: {not_options, term()} | {unknown, atom(), [atom()]} | {duplicate, atom()}
                 | {bad, atom(), term()}.

-define(MAX_U64, 16#FFFFFFFFFFFFFFFF).

%% attach's numeric MTRACE_* variables, lowercase, without the prefix.
-define(NUMBERS, [slots, slots_max, lanes, depth, stacks, sample, clear]).

%% A mark keeps each stack's totals, not its blocks: diff (and the watch) can filter only by
%% what a stack is, never by a block's size or age.
-define(BY_STACK, [library, function, erlang]).

filters() ->
    [{min_age, 0}, {max_age, nil}, {min_size, 0}, {library, nil}, {function, nil},
     {erlang, nil}, {since, nil}].

cluster() ->
    [{nodes, nil}, {timeout, 15000}].

by_stack() ->
    [F || {K, _} = F <- filters(), lists:member(K, ?BY_STACK)].

%% Each reader's options and their defaults, in the order an error lists them.
defaults(olds) ->
    [{demangle, false} | filters()];
defaults(leaks) ->
    [{demangle, true}, {blocks, false}, {why, false}, {gc, true}, {certainty, nil}]
    ++ lists:keystore(min_age, 1, filters(), {min_age, 1}) ++ cluster();
defaults(top) ->
    [{demangle, true}, {group, stack}, {why, false}, {gc, true}] ++ filters() ++ cluster();
defaults(diff) ->
    [{demangle, true}, {group, stack}] ++ by_stack() ++ cluster();
defaults(mark) ->
    cluster();
defaults(why) ->
    [{demangle, true}, {gc, true}];
defaults(stats) ->
    cluster();
defaults(watch) ->
    [{interval, 10000}, {n, 5}, {count, nil}, {group, stack}, {leaks, false}] ++ by_stack();
%% The writers' own defaults hold for an option left nil.
defaults(render) ->
    [{threshold, nil}, {title, nil}];
%% The recording's MTRACE_* variables; nil: the variable's own value, or the library's default.
defaults(attach) ->
    [{K, nil} || K <- [unwind | ?NUMBERS]].

%% Opts (a list of {Key, Value}, or a map) checked against Reader's options: every option of
%% the reader in one map, those not given at their defaults.
-spec validate(reader(), term()) -> {ok, map()} | {error, error()}.
validate(Reader, Opts) when is_map(Opts) ->
    validate(Reader, maps:to_list(Opts));
validate(Reader, Opts) ->
    Defaults = defaults(Reader),
    case pairs(Opts) of
        false ->
            {error, {not_options, Opts}};
        true ->
            Keys = [K || {K, _} <- Defaults],
            Named = [K || {K, _} <- Opts],
            case {[K || K <- Named, not lists:member(K, Keys)], Named -- lists:usort(Named)} of
                {[Unknown | _], _} ->
                    {error, {unknown, Unknown, Keys}};
                {[], [Twice | _]} ->
                    {error, {duplicate, Twice}};
                {[], []} ->
                    Given = maps:from_list(Opts),
                    check(maps:merge(maps:from_list(Defaults), Given), Opts)
            end
    end.

pairs([]) -> true;
pairs([{K, _} | T]) when is_atom(K) -> pairs(T);
pairs(_) -> false.

check(Valid, []) ->
    {ok, Valid};
check(Valid, [{K, V} | T]) ->
    case ok(K, V) of
        true -> check(Valid, T);
        false -> {error, {bad, K, V}}
    end.

ok(K, V) when K =:= demangle; K =:= blocks; K =:= leaks; K =:= why; K =:= gc ->
    is_boolean(V);
ok(min_age, V) ->
    is_number(V) andalso V >= 0;
ok(max_age, V) ->
    V =:= nil orelse is_number(V) andalso V >= 0;
ok(min_size, V) ->
    is_integer(V) andalso V >= 0 andalso V =< ?MAX_U64;
%% The texts the NIF reads into buffers of 1024 bytes (c_src/nif/filter.c, get_text), as C strings.
ok(library, V) ->
    V =:= nil orelse c_text(V);
ok(function, V) ->
    V =:= nil orelse c_text(V) orelse regex(V) =/= false;
%% Module and function become atoms (erlang_mfa/1): 255 characters at most.
ok(erlang, V) ->
    V =:= nil
    orelse c_text(V) andalso V =/= <<>> andalso binary:first(V) =/= $:
           andalso is_list(unicode:characters_to_list(V))
           andalso lists:all(fun(P) -> string:length(P) =< 255 end,
                             binary:split(V, [<<"/">>, <<":">>], [global]));
ok(nodes, V) ->
    V =:= nil orelse is_list(V) andalso lists:all(fun is_atom/1, V);
ok(K, V) when K =:= timeout; K =:= interval; K =:= n ->
    is_integer(V) andalso V > 0;
ok(count, V) ->
    V =:= nil orelse is_integer(V) andalso V > 0;
ok(threshold, V) ->
    V =:= nil orelse is_number(V) andalso V >= 0 andalso V =< 100;
ok(title, V) ->
    V =:= nil orelse is_binary(V);
ok(group, {depth, K}) ->
    is_integer(K) andalso K > 0;
ok(group, V) ->
    lists:member(V, [stack, function, erlang]);
%% A mark (mtrace:mark/0, Mtrace.mark/0) of this node.
ok(since, #{node := Node, time_ns := _}) ->
    Node =:= node();
ok(since, V) ->
    V =:= nil;
ok(unwind, V) ->
    lists:member(V, [nil, libunwind, fp, erlang]);
ok(certainty, V) ->
    lists:member(V, [nil, definite, possible]);
ok(K, V) ->
    lists:member(K, ?NUMBERS)
    andalso (V =:= nil orelse is_integer(V) andalso V >= 0 andalso V =< ?MAX_U64).

c_text(V) ->
    is_binary(V) andalso byte_size(V) < 1024 andalso binary:match(V, <<0>>) =:= nomatch.

%% A function: option's compiled regular expression: re:compile/1's, or an Elixir Regex's.
regex(#{re_pattern := Pattern}) -> Pattern;
regex(Pattern) when is_tuple(Pattern), element(1, Pattern) =:= re_pattern -> Pattern;
regex(_) -> false.

%% The error's sentence, after "Name: ". Lang says how a value is written: erlang (~tp) or
%% elixir (Kernel.inspect/1, only ever called in a node that has Elixir).
-spec message(reader(), error(), erlang | elixir) -> unicode:chardata().
message(_Reader, {not_options, Opts}, Lang) ->
    ["expected ", list_kind(Lang), ", got: ", write(Lang, Opts)];
message(Reader, {unknown, Key, Keys}, Lang) ->
    Why = case lists:member(Reader, [diff, watch]) andalso lists:keymember(Key, 1, filters()) of
              true ->
                  [write(Lang, Key),
                   " filters blocks, and a mark keeps each stack's totals, not its blocks"];
              false ->
                  ["unknown option ", write(Lang, Key)]
          end,
    [Why, "; the options are ", lists:join(", ", [write(Lang, K) || K <- Keys])];
message(_Reader, {duplicate, Key}, Lang) ->
    ["option ", write(Lang, Key), " is given more than once"];
message(_Reader, {bad, since, #{node := Node}}, _Lang) when Node =/= node() ->
    ["since is a mark of ", atom_to_list(Node), ", not of ", atom_to_list(node())];
message(_Reader, {bad, Key, Value}, Lang) ->
    [atom_to_list(Key), " must be ", expected(Key, Lang), ", got: ", write(Lang, Value)].

list_kind(erlang) -> "a list of {Key, Value} or a map";
list_kind(elixir) -> "a keyword list".

write(erlang, V) -> io_lib:format("~tp", [V]);
write(elixir, V) -> 'Elixir.Kernel':inspect(V).

expected(K, _) when K =:= min_age; K =:= max_age ->
    "a number of seconds, 0 or more";
expected(min_size, _) ->
    "a number of bytes, 0 or more";
expected(library, L) ->
    ["a string or ", write(L, nil), " (a string of under 1024 bytes, without NUL)"];
expected(erlang, L) ->
    ["a string, \"Mod\", \"Mod:fun\" or \"Mod:fun/arity\" (names of 255 characters at most), or ",
     write(L, nil)];
expected(function, erlang) ->
    "a string, a compiled regular expression (re:compile/1) or nil "
    "(a string of under 1024 bytes, without NUL)";
expected(function, elixir) ->
    "a string, a Regex or nil (a string of under 1024 bytes, without NUL)";
expected(group, L) ->
    [lists:join(", ", [write(L, A) || A <- [stack, function]]), ", ", write(L, erlang),
     " or {", write(L, depth), ", k} with k > 0"];
expected(since, erlang) ->
    "a mark of this node (mtrace:mark/0)";
expected(since, elixir) ->
    "a mark of this node (Mtrace.mark/0)";
expected(nodes, _) ->
    "a list of node names";
expected(K, _) when K =:= timeout; K =:= interval ->
    "a number of milliseconds, more than 0";
expected(n, _) ->
    "a whole number, more than 0";
expected(count, L) ->
    [write(L, nil), " or a whole number, more than 0"];
expected(threshold, _) ->
    "a percentage, 0 to 100";
expected(title, _) ->
    "a string";
expected(unwind, L) ->
    [lists:join(", ", [write(L, A) || A <- [libunwind, fp]]), ", ", write(L, erlang), " or ",
     write(L, nil)];
expected(certainty, L) ->
    [write(L, definite), ", ", write(L, possible), " or ", write(L, nil)];
expected(K, L) ->
    case lists:member(K, ?NUMBERS) of
        true -> ["a whole number or ", write(L, nil)];
        false -> [write(L, true), " or ", write(L, false)]
    end.

%% The filter term of c_src/nif/filter.c: {min_age_ns, max_age_ns, since_ns, min_size, library, function,
%% erlang}; a block filter left out (diff takes none) passes every block. A regular expression
%% is matched on this side (mtrace_sites): C gets nil for it. erlang is the start of the names
%% the perf map gives ("'Elixir.Mod':fun/").
-spec filter(map()) -> tuple().
filter(Opts) ->
    Get = fun(K, D) -> case maps:get(K, Opts, nil) of nil -> D; V -> V end end,
    {ns(Get(min_age, 0)),
     case Get(max_age, nil) of nil -> ?MAX_U64; Max -> ns(Max) end,
     case Get(since, nil) of nil -> 0; #{time_ns := T} -> T end,
     Get(min_size, 0),
     Get(library, nil),
     case Get(function, nil) of F when is_binary(F) -> F; _ -> nil end,
     case Get(erlang, nil) of nil -> nil; E -> erlang_prefix(erlang_mfa(E)) end}.

%% "Mod", "Mod:fun" or "Mod:fun/arity" as {module, function | nil, arity | nil}; a module that
%% starts with a capital is an Elixir alias ("MyApp.Cache" is 'Elixir.MyApp.Cache', "Elixir" is
%% 'Elixir', as in Elixir).
erlang_mfa(Text) ->
    {Mod, Fun} = case string:split(Text, ":") of
                     [M, F] -> {M, F};
                     [M] -> {M, nil}
                 end,
    Module = case Mod of
                 <<"Elixir">> -> 'Elixir';
                 <<"Elixir.", _/binary>> -> binary_to_atom(Mod);
                 <<C, _/binary>> when C >= $A, C =< $Z -> binary_to_atom(<<"Elixir.", Mod/binary>>);
                 _ -> binary_to_atom(Mod)
             end,
    case Fun of
        F0 when F0 =:= nil; F0 =:= <<>> ->
            {Module, nil, nil};
        _ ->
            case re:run(Fun, "^(.+)/(\\d+)$", [{capture, all_but_first, binary}, unicode]) of
                {match, [Name, Arity]} -> {Module, binary_to_atom(Name), binary_to_integer(Arity)};
                nomatch -> {Module, binary_to_atom(Fun), nil}
            end
    end.

%% As the BEAM writes them in its perf map: atoms quoted where Erlang quotes them.
erlang_prefix({Module, Function, Arity}) ->
    iolist_to_binary([io_lib:format("~w:", [Module]),
                      case Function of nil -> []; _ -> io_lib:format("~w/", [Function]) end,
                      case Arity of nil -> []; _ -> integer_to_list(Arity) end]).

%% The MTRACE_* variables that attach's validated options stand for, as "NAME=value" strings.
-spec variables(map()) -> [binary()].
variables(Opts) ->
    [iolist_to_binary(["MTRACE_", string:uppercase(atom_to_list(K)), "=", text(V)])
     || {K, _} <- defaults(attach), V <- [maps:get(K, Opts, nil)], V =/= nil].

text(V) when is_integer(V) -> integer_to_list(V);
text(V) when is_atom(V) -> atom_to_list(V).

%% Seconds (a number) to whole nanoseconds.
-spec ns(number()) -> non_neg_integer().
ns(Seconds) -> round(Seconds * 1000000000).

%% The largest number the NIF takes: no limit.
-spec no_limit() -> non_neg_integer().
no_limit() -> ?MAX_U64.
