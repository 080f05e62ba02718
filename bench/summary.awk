# bench/out/raw.csv (round,section,row,config,unit,value) to results.csv: per figure the median,
# min and max over the rounds, and the median of its ratios to the untraced figure ("none") of
# the same section, row and round. Run with -F, -v OFS=,
{
    k = $2 FS $3 FS $4 FS $5
    if (!(k in n)) order[++keys] = k
    n[k]++
    v[k, n[k]] = $6
    rnd[k, n[k]] = $1
    if ($4 == "none") base[$1, $2, $3] = $6
}

# Sorts a[1..m] in place and returns its median.
function median(a, m,    i, j, t) {
    for (i = 2; i <= m; i++)
        for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
        }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}

END {
    print "section", "row", "config", "unit", "rounds", "median", "min", "max", "ratio"
    for (i = 1; i <= keys; i++) {
        k = order[i]
        m = n[k]
        split(k, f, FS)
        r = 0
        for (j = 1; j <= m; j++) {
            vals[j] = v[k, j]
            b = rnd[k, j] SUBSEP f[1] SUBSEP f[2]
            if ((b in base) && base[b] > 0) ratios[++r] = v[k, j] / base[b]
        }
        med = median(vals, m)
        ratio = r ? sprintf("%.2f", median(ratios, r)) : ""
        print f[1], f[2], f[3], f[4], m, med, vals[1], vals[m], ratio
    }
}
