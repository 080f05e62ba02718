%% What a mark needs done in the node it reads, and the node's own side of stats/0: Erlang
%% without Elixir, so that a node that has neither mtrace nor Elixir on its code path runs it
%% once bin/mtrace --node has loaded it (with mtrace_nif). Mtrace calls it through Mtrace.Target.
-module(mtrace_node).

-export([prepare/1, learn/0, stats/0]).

-define(TRIES, 3).

%% Before a mark: the VM's process heaps learnt (learn/0: their unused parts are not read); with
%% Gc, the caller collected first, then every other process, each where it runs, at once (a
%% collection's old heap may stay allocated for a while after it, freed into the allocator
%% instance of the scheduler that made it, which frees it when it next runs: the caller's,
%% collected right before the mark, would still hold the words the collection moved); then every
%% scheduler's stack scrubbed. The requests go out from a process of their own: an answer that
%% comes after it stops waiting lands in that process's mailbox, which dies with it, not in the
%% caller's.
-spec prepare(boolean()) -> ok.
prepare(Gc) ->
    learn(),
    Caller = self(),
    Gc andalso erlang:garbage_collect(),
    {_, Monitor} =
        spawn_monitor(fun() ->
                         Gc andalso collect_others(Caller),
                         scrub_schedulers()
                      end),
    receive
        {'DOWN', Monitor, process, _, _} -> ok
    end.

collect_others(Caller) ->
    Me = self(),
    Refs =
        [begin
             Ref = make_ref(),
             erlang:garbage_collect(Pid, [{async, Ref}]),
             Ref
         end
         || Pid <- processes(), Pid =/= Me, Pid =/= Caller],
    await(Refs, 5000).

%% A scheduler's stack keeps, in the slots of the frames it sleeps in, words that a NIF which ran
%% on it left there (a lost block's address among them); and the JIT's register block, on that
%% stack, keeps a pointer into the last binary the scheduler built, which may have been freed and
%% its memory given to a block lost since. Each scheduler, in a process bound to it, builds a
%% small binary (on that process's heap: the pointer then leads there) and runs scrub_nif/2
%% (scrub_here/1), and then lays its sleeping frames over zeros. spawn_opt takes {scheduler, Id}
%% without documenting it: where it is refused, nothing is scrubbed. A user's dirty NIF leaves
%% its words on a dirty scheduler's stack alike: as many calls as there are dirty schedulers of
%% each kind meet in a NIF that then zeroes its stack, each on a scheduler of its own.
scrub_schedulers() ->
    Asker = self(),
    Bound =
        [Ref
         || Id <- lists:seq(1, erlang:system_info(schedulers_online)),
            Ref <- [make_ref()],
            bound_spawn(fun() -> Asker ! {scrubbed, Ref, scrub_here(Id)} end, Id) =:= ok],
    Dirty =
        [begin
             Ref = make_ref(),
             spawn(fun() -> Asker ! {scrubbed, Ref, mtrace_nif:Scrub(Round, N)} end),
             Ref
         end
         || {Kind, Scrub} <- [{dirty_cpu_schedulers_online, scrub_dirty_cpu_nif},
                              {dirty_io_schedulers, scrub_dirty_io_nif}],
            N <- [erlang:system_info(Kind)],
            Round <- [erlang:unique_integer([positive])],
            _ <- lists:seq(1, N)],
    await(Bound ++ Dirty, 1000).

%% The same register block holds 1024 float registers that programs hardly use: they keep what
%% the scheduler thread's start left there (beam_regs.h). The float computed here is the last
%% that float instructions make before the call, which the JIT leaves in the first of them:
%% scrub_nif/2 finds them by it, and the mark does not read them.
scrub_here(Id) ->
    F0 = float(erlang:unique_integer([positive])) * 1.0e-3 + 0.123456789,
    mtrace_nif:scrub_nif(<<Id:64, Id:64>>, F0).

bound_spawn(Fun, Scheduler) ->
    try erlang:spawn_opt(Fun, [{scheduler, Scheduler}]) of
        _ -> ok
    catch
        error:badarg -> refused
    end.

%% An answer {_, Ref, _} for each Ref, waited for at most Ms in all.
await(Refs, Ms) ->
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    lists:foreach(fun(Ref) ->
                     receive
                         {_, Ref, _} -> ok
                     after max(Deadline - erlang:monotonic_time(millisecond), 0) -> ok
                     end
                  end,
                  Refs).

%% Teaches the NIF where a process's heap pointers lie in the VM's Process struct
%% (c_src/mark/beam_heaps.h), once a node, so that the mark leaves out the unused part of each heap:
%% the stale words there keep lost blocks, and the free id lists of the process and port tables,
%% found by the two limits. It learns from processes whose numbers the VM gives: two that wait in
%% receive, of normal and of high priority, each with an old heap, and the learner itself,
%% running the NIF. Later calls return the first answer, but for a node where the waiting
%% processes ran in every try (a busy one): a later call tries again.
-spec learn() -> ok | {error, binary()}.
learn() ->
    case persistent_term:get(?MODULE, undefined) of
        undefined ->
            case attempt(?TRIES) of
                {ran, Why} ->
                    {error, Why};
                Result ->
                    persistent_term:put(?MODULE, Result),
                    Result
            end;
        Result ->
            Result
    end.

attempt(Tries) ->
    {Pid, Monitor} = spawn_monitor(fun() -> exit({learnt, learn_here()}) end),
    Result =
        receive
            {'DOWN', Monitor, process, Pid, {learnt, R}} -> R;
            {'DOWN', Monitor, process, Pid, Reason} ->
                {error, iolist_to_binary(io_lib:format("~p", [Reason]))}
        end,
    case Result of
        {retry, _} when Tries > 1 -> attempt(Tries - 1);
        {retry, Why} -> {ran, Why};
        Other -> Other
    end.

learn_here() ->
    Waiting = [waiting(normal), waiting(high)],
    try
        Before = [known(W) || W <- Waiting],
        Result =
            case lists:member(nil, Before) of
                false ->
                    mtrace_nif:heaps_learn_nif(erlang:system_info(process_limit),
                                               erlang:system_info(port_limit),
                                               Before);
                true -> nil
            end,
        %% a process that ran meanwhile (a signal handled) may have moved its pointers
        case Result =:= nil orelse [known(W) || W <- Waiting] =/= Before of
            true -> {retry, <<"the processes ran">>};
            false -> Result
        end
    after
        [exit(Pid, kill) || {Pid, _} <- Waiting]
    end.

%% A process that made live data, moved it to an old heap by two minor collections, and waits.
waiting(Priority) ->
    Parent = self(),
    Pid = spawn(fun() ->
                   process_flag(priority, Priority),
                   Data = lists:seq(1, 1000),
                   erlang:garbage_collect(self(), [{type, minor}]),
                   erlang:garbage_collect(self(), [{type, minor}]),
                   Parent ! {self(), waiting},
                   receive
                       never -> Data
                   end
                end),
    receive
        {Pid, waiting} -> {Pid, Priority}
    end.

%% What process_info/2 says of a waiting process, in words, as the NIF takes it; nil while it
%% does not wait.
known({Pid, Priority}) ->
    case erlang:process_info(Pid, [status, garbage_collection_info, stack_size]) of
        [{status, waiting}, {garbage_collection_info, Gc}, {stack_size, Stack}] ->
            case proplists:get_value(mbuf_size, Gc) of
                0 ->
                    {Pid,
                     proplists:get_value(heap_block_size, Gc),
                     proplists:get_value(heap_size, Gc),
                     proplists:get_value(recent_size, Gc),
                     Stack,
                     proplists:get_value(old_heap_block_size, Gc),
                     proplists:get_value(old_heap_size, Gc),
                     Priority};
                _ -> nil
            end;
        _ -> nil
    end.

%% stats_nif/0's map with what the node itself says: how the NIF API's allocations and resources
%% are seen, and whether stacks go on through Erlang functions.
-spec stats() -> map().
stats() ->
    {PerfMap, Stats} = maps:take(perf_map, mtrace_nif:stats_nif()),
    Stats#{nif_alloc_visible => visible(Stats, driver_alloc),
           resources_visible => visible(Stats, binary_alloc),
           erlang_frames => erlang_frames(maps:get(unwind, Stats), PerfMap)}.

%% How what the NIF API serves from the VM's allocator is seen: through the hooks, or in malloc
%% when the allocator is off.
visible(#{recording := true, nif_api_hooked := true}, _Allocator) -> hooks;
visible(_Stats, Allocator) ->
    case erlang:system_info({allocator, Allocator}) of
        false -> vm_flags;
        _ -> false
    end.

%% PerfMap: the library's own answer, which the unwinder follows (the node holds the file open).
erlang_frames(erlang, PerfMap) ->
    case {erlang:system_info(emu_flavor), PerfMap} of
        {jit, true} -> on;
        {jit, false} -> no_perf_map;
        _ -> no_jit
    end;
erlang_frames(_Unwind, _PerfMap) -> off.
