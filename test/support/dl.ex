defmodule Mtrace.Test.Dl do
  @moduledoc false
  # The test NIF test/support/c_src/dl.c: plain shared libraries loaded, called by the name of
  # an allocating function, and unloaded, through mtrace's dlclose or past it.

  @on_load :load
  def load do
    path = Path.expand("c_src/dl", __DIR__)
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  @doc "{:ok, handle, load_bias} | {:error, charlist}"
  def open(_path), do: :erlang.nif_error(:not_loaded)
  @doc "The address of the block symbol(size) allocated."
  def call(_handle, _symbol, _size), do: :erlang.nif_error(:not_loaded)
  def close(_handle), do: :erlang.nif_error(:not_loaded)
  def close_unseen(_handle), do: :erlang.nif_error(:not_loaded)
  def free(_address), do: :erlang.nif_error(:not_loaded)
end
