%% Sites as the library's own report prints them (c_src/out/report.c, docs/report-format.md),
%% for both APIs: mtrace:print/1, bin/mtrace --node, and Mtrace.Format.Text, which Mtrace.Report
%% reads back as it reads an exit report. Sites are maps with Mtrace.Site's fields (an Elixir
%% struct is one). Pure: runs in any node.
-module(mtrace_text).

-export([render/2, version/0]).

%% The report format's version this mtrace writes and reads (report.h, MT_REPORT_FORMAT).
-spec version() -> pos_integer().
version() -> 1.

%% The sites in a report of their own. Opts: title (what follows "mtrace report 1: ", e.g.
%% "node@host, pid 42, on request"), what (leaks, the default, or live: the list's head and
%% summary).
-spec render([map()], #{title => unicode:chardata(), what => leaks | live}) -> binary().
render(Sites, Opts) ->
    What = maps:get(what, Opts, leaks),
    N = length(Sites),
    %% Bytes as they are: a library's path need not be UTF-8. Only the title and Erlang names,
    %% characters, are encoded.
    iolist_to_binary(
    ["# mtrace report v", integer_to_list(version()), "\n",
     "mtrace report 1: ", unicode:characters_to_binary(maps:get(title, Opts, "on request")), "\n",
     summary(Sites, What),
     "\n",
     head(Sites, What),
     [site(S, K, N) || {K, S} <- lists:enumerate(Sites)],
     "\nmtrace: end of report 1\n"]).

summary(Sites, leaks) ->
    Direct = lists:sum([maps:get(direct_blocks, S) || S <- Sites]),
    Indirect = lists:sum([maps:get(indirect_blocks, S) || S <- Sites]),
    Possible = lists:sum([P || #{possible_blocks := P} <- Sites, P =/= nil]),
    [io_lib:format("  lost now: ~ts (~b direct, ~b indirect)\n", [amount(Sites), Direct, Indirect]),
     case Possible > 0 of
         true ->
             io_lib:format("    of which possibly lost: ~b blocks that a word a rule discounted "
                           "points into (docs/rules.md)\n",
                           [Possible]);
         false ->
             []
     end];
summary(Sites, live) ->
    ["  live heap: ", amount(Sites), "\n"].

head([], leaks) ->
    "leaks: none\n";
head([], live) ->
    "live blocks: none\n";
head(Sites, What) ->
    N = length(Sites),
    io_lib:format("~ts: ~ts by call site, largest first (~b site~ts):\n",
                  [What, amount(Sites), N, plural(N)]).

amount(Sites) ->
    Bytes = lists:sum([maps:get(bytes, S) || S <- Sites]),
    Blocks = lists:sum([maps:get(blocks, S) || S <- Sites]),
    io_lib:format("~b bytes in ~b block~ts", [Bytes, Blocks, plural(abs(Blocks))]).

plural(1) -> "";
plural(_) -> "s".

site(#{direct_blocks := D, indirect_blocks := I} = S, K, N) ->
    Lost = case D > 0 orelse I > 0 of
               true ->
                   [io_lib:format(" lost (~b direct, ~b indirect)", [D, I]),
                    case maps:get(certainty, S) of
                        possible ->
                            io_lib:format(" (~b possibly: ~ts)",
                                          [maps:get(possible_blocks, S), hd(maps:get(rules, S))]);
                        _ ->
                            []
                    end];
               false ->
                   []
           end,
    ["\n", amount([S]), Lost, io_lib:format(", site ~b of ~b\n", [K, N]), frames(S)].

frames(#{stack := [], contents := Contents}) when is_binary(Contents) ->
    ["    (no stack: ", Contents, ")\n"];
frames(#{stack := []}) ->
    "    (no stack)\n";
frames(#{stack := [First | Rest]}) ->
    [line("at", First) | [line("by", F) || F <- Rest]].

line(Word, #{address := Address} = Frame) ->
    ["    ", Word, " 0x", hex(Address), ": ", frame(Frame), "\n"].

frame(#{unloaded := 'maybe'}) -> "?? (unloaded or replaced)";
frame(#{kind := erlang} = F) -> [erlang_name(F), source(F), " (erlang)"];
frame(#{library := nil}) -> "?? (no module)";
frame(#{unloaded := true} = F) -> [native(F), " [unloaded]"];
frame(F) -> native(F).

native(#{function := nil, library := Library} = F) ->
    [Library, "+0x", hex(offset(F))];
native(#{function := Function, library := Library, file := File, line := Line} = F)
  when is_binary(File), is_integer(Line) ->
    [Function, source(F), " ", Library, "+0x", hex(offset(F))];
native(#{function := Function, library := Library}) ->
    [Function, " (", Library, ")"].

offset(#{offset := nil}) -> 0;
offset(#{offset := Offset}) -> Offset.

erlang_name(#{module := nil, function := Name}) -> Name;
erlang_name(#{module := M, function := F, arity := A}) ->
    unicode:characters_to_binary(io_lib:format("~tw:~tw/~b", [M, F, A])).

source(#{file := File, line := Line}) when is_binary(File), is_integer(Line) ->
    [" (", filename:basename(File), ":", integer_to_list(Line), ")"];
source(_) ->
    "".

hex(N) -> string:lowercase(integer_to_list(N, 16)).
