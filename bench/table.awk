# Prints bench/out/results.csv as one table a section: a row per row, a column per config, each
# cell the median and, where there is one, its ratio to the untraced run. Run with -F,
function fmt(x) {
    if (x >= 100 || x == int(x)) return sprintf("%.0f", x)
    return sprintf(x >= 10 ? "%.1f" : "%.2f", x)
}

NR > 1 {
    s = $1
    if (!(s in nrows)) sections[++nsec] = s
    label = $2 ", " $4
    if (!((s, label) in seenrow)) { seenrow[s, label] = 1; rows[s, ++nrows[s]] = label }
    if (!((s, $3) in seencfg)) { seencfg[s, $3] = 1; cfgs[s, ++ncfgs[s]] = $3 }
    cell[s, label, $3] = fmt($6) ($9 != "" && $3 != "none" ? " (" $9 "x)" : "")
    if (length(label) > width[s]) width[s] = length(label)
}

END {
    title["pair"] = "malloc+free pair in bench/mbench.c: best repetition, median over rounds " \
        "(ratio to untraced, same round)"
    title["memory"] = "memory: RSS with mtrace less without (C); Mtrace.stats() (BEAM node)"
    title["beam"] = "the BEAM: median over rounds (ratio to untraced, same round); " \
        "NIF pairs: best repetition"
    title["olds"] = "Mtrace.olds(100, true): cold (first call, symbol tables read) and warm"
    title["top"] = "Mtrace.top(100), with file:line: cold (first call, symbol tables and DWARF " \
        "read) and warm"
    title["leaks"] = "Mtrace.leaks_info/1, heap/0 and why/2, default table, 64-byte blocks: " \
        "the whole call, and the pause of the other threads"
    title["growth"] = "growth: blocks leaked by mbench, never freed; median over rounds (ratio to " \
        "untraced, same round)"
    for (i = 1; i <= nsec; i++) {
        s = sections[i]
        printf("%s%s\n%-" width[s] "s", (i > 1 ? "\n" : ""), title[s], "")
        for (c = 1; c <= ncfgs[s]; c++) printf "  %14s", cfgs[s, c]
        printf "\n"
        for (r = 1; r <= nrows[s]; r++) {
            printf "%-" width[s] "s", rows[s, r]
            for (c = 1; c <= ncfgs[s]; c++) {
                x = cell[s, rows[s, r], cfgs[s, c]]
                printf "  %14s", x == "" ? "-" : x
            }
            printf "\n"
        }
    }
}
