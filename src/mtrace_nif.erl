%% The NIF stubs of priv/mtrace.so, in Erlang so that a node without Elixir can load them
%% (bin/mtrace --node). lib/mtrace/nif.ex states each function's types; its callers reach these
%% through Mtrace.Target, in this node or in another one.
%%
%% In a node that has the mtrace application, on_load loads the library by path from its priv
%% directory: a node preloaded with the same file gets the same library (and the same live table)
%% back from dlopen. Loaded by code:load_binary/3 into a node without it, the module loads
%% nothing until load/1 names the file.
-module(mtrace_nif).

-export([load/1, loaded/0]).
-export([olds_nif/3, sites_nif/2, leaks_nif/2, stacks_matching_nif/2, frames_nif/2,
         scrub_nif/2, scrub_dirty_cpu_nif/2, scrub_dirty_io_nif/2, stats_nif/0, heap_nif/0,
         reset_nif/0, attach_nif/1, detach_nif/0, why_nif/1, whys_nif/1, heaps_learn_nif/3]).

-on_load(on_load/0).

on_load() ->
    case code:priv_dir(mtrace) of
        {error, bad_name} -> ok;
        Dir -> load(filename:join(Dir, "mtrace.so"))
    end.

%% Loads the library at Path (a file ending in .so), once: ok, or {error, {Reason, Text}} as
%% erlang:load_nif/2 says it.
-spec load(file:filename_all()) -> ok | {error, {atom(), string()}}.
load(Path) ->
    erlang:load_nif(filename:rootname(Path), 0).

%% Whether the library is loaded in this node.
-spec loaded() -> boolean().
loaded() ->
    try stats_nif() of
        _ -> true
    catch
        error:{nif_not_loaded, _} -> false;
        error:undef -> false
    end.

-define(NIF, erlang:nif_error({nif_not_loaded, ?MODULE})).

olds_nif(_N, _Demangle, _Filter) -> ?NIF.
sites_nif(_Filter, _SplitNs) -> ?NIF.
leaks_nif(_Filter, _Why) -> ?NIF.
stacks_matching_nif(_Filter, _StackIds) -> ?NIF.
frames_nif(_StackIds, _Demangle) -> ?NIF.
scrub_nif(_Built, _F0) -> ?NIF.
scrub_dirty_cpu_nif(_Round, _N) -> ?NIF.
scrub_dirty_io_nif(_Round, _N) -> ?NIF.
stats_nif() -> ?NIF.
heap_nif() -> ?NIF.
reset_nif() -> ?NIF.
attach_nif(_Variables) -> ?NIF.
detach_nif() -> ?NIF.
why_nif(_Address) -> ?NIF.
whys_nif(_StackIds) -> ?NIF.
heaps_learn_nif(_Limit, _PortLimit, _Known) -> ?NIF.
