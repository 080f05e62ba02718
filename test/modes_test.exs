defmodule Mtrace.ModesTest do
  # The unwinding modes find the same leaks with the same stacks where frame pointers exist (the
  # test NIF is built -O0, with them), and the per-thread stack cache never hands a stack to a
  # call made from a different path with the same key (return address and stack pointer).
  use ExUnit.Case, async: true
  import Mtrace.Test.Helpers

  @moduletag timeout: 180_000

  @code """
  alias Mtrace.Test.Leaky
  Mtrace.reset()
  first = for _ <- 1..3, do: Leaky.alloc(:malloc, 111)
  # One call of malloc by two paths with one cache key, path_a's walked and cached (20 calls,
  # past the 16 misses after which libunwind's exact walk runs): path_b's must not get its stack.
  paths = Leaky.two_paths(20, 333)
  other = Leaky.alloc(:cxx_new, 222)
  wanted = [other | first ++ paths]
  for {_, size, addr, _, stack} <- Mtrace.olds(1_000_000, false), addr in wanted do
    frames = Enum.map_join(stack, ";", fn {:erlang, name} -> "erlang:\#{name}"; {lib, name} -> "\#{Path.basename(lib)}:\#{name}"; nil -> "?" end)
    IO.puts("record \#{size} \#{frames}")
  end
  """

  defp records(mode) do
    {out, 0} = run_node(@code, [{"LD_PRELOAD", mtrace_so()}, {"MTRACE_UNWIND", mode}])

    for "record " <> rest <- String.split(out, "\n") do
      [size, frames] = String.split(rest, " ", parts: 2)
      # Up to the NIF's entry: beyond it lies the BEAM, built without frame pointers.
      {ours, [entry | _]} =
        Enum.split_while(String.split(frames, ";"), &(not (&1 =~ ~r/^leaky.so:nif_/)))

      {String.to_integer(size), ours ++ [entry]}
    end
    |> Enum.sort()
  end

  test "libunwind and frame-pointer modes record the same leaks with the same stacks" do
    libunwind = records("libunwind")
    fp = records("fp")

    assert [
             {111, ["mtrace.so:malloc", "leaky.so:leak_malloc", "leaky.so:nif_alloc"]},
             {111, ["mtrace.so:malloc", "leaky.so:leak_malloc", "leaky.so:nif_alloc"]},
             {111, ["mtrace.so:malloc", "leaky.so:leak_malloc", "leaky.so:nif_alloc"]},
             {222, ["mtrace.so:malloc", "libstdc++.so.6:_Znwm" | _]},
             {333, ["mtrace.so:malloc", "leaky.so:leak_malloc", "leaky.so:path_a", nif]},
             {333, ["mtrace.so:malloc", "leaky.so:leak_malloc", "leaky.so:path_b", nif]}
           ] = libunwind

    assert nif == "leaky.so:nif_two_paths"

    # Every frame on the C path keeps a frame pointer: the stacks are equal.
    assert Enum.take(fp, 3) == Enum.take(libunwind, 3)
    assert Enum.drop(fp, 4) == Enum.drop(libunwind, 4)

    # libstdc++'s operator new keeps none, so a frame-pointer walk loses the frame that called it
    # (it is libunwind that sees leaky::cxx_new); what it keeps is in libunwind's order.
    {222, fp_cxx} = Enum.at(fp, 3)
    {222, unwound_cxx} = Enum.at(libunwind, 3)
    assert fp_cxx -- unwound_cxx == []
    assert Enum.filter(unwound_cxx, &(&1 in fp_cxx)) == fp_cxx
    assert hd(fp_cxx) == "mtrace.so:malloc" and List.last(fp_cxx) == "leaky.so:nif_alloc"
  end
end
