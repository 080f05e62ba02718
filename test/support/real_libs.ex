defmodule Mtrace.Test.RealLibs do
  @moduledoc false
  # test/support/c_src/reallibs.c as a NIF: OpenSSL (the system's CA store, TLS handshakes),
  # zlib, libxml2, sqlite3 and libyaml used as servers use them, their state kept in globals.
  @on_load :load
  def load do
    path = Path.expand("c_src/reallibs", __DIR__)
    :erlang.load_nif(String.to_charlist(path), 0)
  end

  def run, do: :erlang.nif_error(:not_loaded)
end
