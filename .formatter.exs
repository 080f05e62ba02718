[
  inputs: ["{mix,.formatter}.exs", "{bin,bench,config,lib,test}/**/*.{ex,exs}"]
]
