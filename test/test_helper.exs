Mtrace.Test.Helpers.make!(Path.expand("support/c_src", __DIR__))

ExUnit.start()
