defmodule Mtrace.Test.Lost do
  @moduledoc false
  # The test NIF of the leaks tests (test/support/c_src/lost.c): blocks lost and kept in known
  # ways, from named functions.

  @on_load :load
  def load do
    path = Path.expand("c_src/lost", __DIR__)
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  def lose_list(_n), do: :erlang.nif_error(:not_loaded)
  def keep_static(_n, _size), do: :erlang.nif_error(:not_loaded)
  def keep_tree(_depth), do: :erlang.nif_error(:not_loaded)
  def keep_tls(_size), do: :erlang.nif_error(:not_loaded)
  def buffer(_size), do: :erlang.nif_error(:not_loaded)
  def lose_resource(_size), do: :erlang.nif_error(:not_loaded)
  def resource_header(_size), do: :erlang.nif_error(:not_loaded)
  def enif_blocks(_lost, _kept, _size), do: :erlang.nif_error(:not_loaded)
  def lose_on_stack(_size), do: :erlang.nif_error(:not_loaded)
  def storm(_threads), do: :erlang.nif_error(:not_loaded)
  def many(_kept, _lost, _size), do: :erlang.nif_error(:not_loaded)
end
