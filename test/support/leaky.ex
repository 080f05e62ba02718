defmodule Mtrace.Test.Leaky do
  @moduledoc false
  # The test NIF (test/support/c_src/leaky.c): allocations from known, named C functions.
  # alloc/2 also takes :enif_alloc, which is not among kinds/0: its blocks are the VM's, seen
  # through the NIF API's hooks, not the malloc family's; and :cxx_widget, a C++ object with a vtable (leaky::Widget, its size
  # ignored).

  @on_load :load
  def load do
    path = Path.expand("c_src/leaky", __DIR__)
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  @kinds [
    :malloc,
    :calloc,
    :realloc,
    :reallocarray,
    :posix_memalign,
    :aligned_alloc,
    :memalign,
    :valloc,
    :pvalloc,
    :strdup,
    :strndup,
    :cxx_new
  ]
  def kinds, do: @kinds

  def alloc(_kind, _size), do: :erlang.nif_error(:not_loaded)
  # alloc/2 on a dirty scheduler.
  def dirty_alloc(_kind, _size), do: :erlang.nif_error(:not_loaded)
  def release(_kind, _address), do: :erlang.nif_error(:not_loaded)
  def churn(_rounds, _size), do: :erlang.nif_error(:not_loaded)
  def enif_churn(_rounds, _size), do: :erlang.nif_error(:not_loaded)
  # [a, b]: blocks of one malloc call reached by two paths with the same stack cache key.
  def two_paths(_rounds, _size), do: :erlang.nif_error(:not_loaded)
end
