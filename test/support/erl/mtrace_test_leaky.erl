%% test/support/c_src/leaky.c for a node without Elixir (test/node_cli_test.exs), and a server
%% that loses one block in every ten of its requests, each made by leak_malloc.
-module(mtrace_test_leaky).

-export([serve/2, requests/2]).
-export([alloc/2, dirty_alloc/2, release/2, churn/2, enif_churn/2, two_paths/2]).

-on_load(init/0).

init() ->
    Dir = filename:dirname(code:which(?MODULE)),
    erlang:load_nif(filename:join(Dir, "leaky_erl"), 0).

%% Requests of Size bytes forever, one every Ms milliseconds; every tenth block is forgotten.
serve(Size, Ms) ->
    serve(Size, Ms, 1).

serve(Size, Ms, I) ->
    Block = alloc(malloc, Size),
    I rem 10 =:= 0 orelse release(malloc, Block),
    timer:sleep(Ms),
    serve(Size, Ms, I + 1).

%% N requests of Size bytes, at once; every tenth block is forgotten.
requests(Size, N) ->
    lists:foreach(fun(I) ->
                          Block = alloc(malloc, Size),
                          I rem 10 =:= 0 orelse release(malloc, Block)
                  end,
                  lists:seq(1, N)).

-define(NIF, erlang:nif_error(not_loaded)).

alloc(_Kind, _Size) -> ?NIF.
dirty_alloc(_Kind, _Size) -> ?NIF.
release(_Kind, _Address) -> ?NIF.
churn(_Kind, _N) -> ?NIF.
enif_churn(_Size, _N) -> ?NIF.
two_paths(_Rounds, _Size) -> ?NIF.
