{out, status} =
  System.cmd("make", ["-C", Path.expand("support/c_src", __DIR__)], stderr_to_stdout: true)

if status != 0, do: raise("building the test NIF failed:\n" <> out)

ExUnit.start()
