defmodule Mtrace.Nif do
  @moduledoc false
  # The NIF stubs. priv/mtrace.so is loaded by path, so that a node preloaded with the same file
  # gets the same library (and the same live table) back from dlopen.

  @on_load :load
  @spec load() :: :ok | {:error, term()}
  def load do
    :erlang.load_nif(String.to_charlist(Path.rootname(library_path())), 0)
  end

  @spec library_path() :: Path.t()
  def library_path, do: Path.join(:code.priv_dir(:mtrace), "mtrace.so")

  @spec olds_nif(non_neg_integer(), boolean(), tuple()) :: [tuple()] | :not_preloaded
  def olds_nif(_n, _demangle, _filter), do: :erlang.nif_error(:not_loaded)

  @spec sites_nif(tuple(), non_neg_integer()) ::
          {non_neg_integer(), [tuple()]} | :not_preloaded
  def sites_nif(_filter, _split_ns), do: :erlang.nif_error(:not_loaded)

  @spec leaks_nif(tuple()) ::
          {[
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | term(),
              non_neg_integer() | nil, boolean(), pos_integer() | nil}
           ], map()}
          | {:error, term(), String.t() | nil}
          | {:not_preloaded, String.t()}
  def leaks_nif(_filter), do: :erlang.nif_error(:not_loaded)

  @spec frames_nif([non_neg_integer()], boolean()) :: [[tuple()]]
  def frames_nif(_stack_ids, _demangle), do: :erlang.nif_error(:not_loaded)

  @spec stats_nif() :: map()
  def stats_nif, do: :erlang.nif_error(:not_loaded)

  @spec heap_nif() :: {:ok, map()} | {:error, String.t()}
  def heap_nif, do: :erlang.nif_error(:not_loaded)

  @spec reset_nif() :: non_neg_integer() | :not_preloaded
  def reset_nif, do: :erlang.nif_error(:not_loaded)

  @spec attach_nif([String.t()]) :: :ok | {:error, String.t()}
  def attach_nif(_variables), do: :erlang.nif_error(:not_loaded)

  @spec detach_nif() :: :ok | {:error, String.t()}
  def detach_nif, do: :erlang.nif_error(:not_loaded)

  @spec why_nif(non_neg_integer()) ::
          {tuple(),
           [
             {non_neg_integer(), non_neg_integer(), non_neg_integer() | nil,
              non_neg_integer() | nil}
           ]}
          | nil
          | :not_a_block
          | {:error, term(), String.t() | nil}
          | {:not_preloaded, String.t()}
  def why_nif(_address), do: :erlang.nif_error(:not_loaded)
end
