/* cfi.c: the table unwinder (see cfi.h). The rules of one return address are found the way the
 * DWARF standard runs them: the FDE that covers the address (a binary search of .eh_frame_hdr's
 * table), its CIE's initial instructions, then the FDE's own, up to the row of the address. Only
 * the CFA rule and the rules of RBP and of the return address are kept; a rule the step cannot
 * follow marks the row as one to give up on. Rows are cached per thread by address, so a stack
 * seen before costs a look-up and two loads a frame. */
#define _GNU_SOURCE
#include "record/cfi.h"

#include <dlfcn.h>
#include <string.h>

#include "base/platform.h"

enum { DW_EH_PE_indirect = 0x80 };

/* What a row says of a frame. A free cache slot is a row of pc 0, which no return address is. */
enum how {
    HOW_STEP,      /* step by the row's rules */
    HOW_LAST,      /* the return address is undefined: the outermost frame */
    HOW_NO_OBJECT, /* in no loaded object (JIT code): never cached, an object may come there */
    HOW_GIVE_UP,   /* no rules, or rules a step cannot follow */
};

/* How RBP is found in the caller. Undefined, it ends the stack there, as libunwind takes it. */
enum rbp_rule { RBP_SAME, RBP_AT, RBP_IS, RBP_LOST, RBP_END };

struct row {
    uintptr_t pc;
    int32_t cfa_off;
    int16_t ra_off, rbp_off;
    uint8_t how, cfa_on_rbp, rbp_rule;
};

#define ROWS_BITS 10
#define ROWS (1 << ROWS_BITS)

struct mt_cfi_rows {
    unsigned generation; /* of the unloads when the rows were filled */
    struct row row[ROWS];
};

static unsigned unloads;

size_t mt_cfi_rows_bytes(void)
{
    return sizeof(struct mt_cfi_rows);
}

void mt_cfi_unloading(void)
{
    __atomic_fetch_add(&unloads, 1, __ATOMIC_RELEASE);
}

/* The caller's return address, its stack pointer after the return and RBP, as they are at the
 * call: a function of its own, in assembly, so that no prologue has moved them. */
void mt_cfi_regs(uintptr_t regs[3]);
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden mt_cfi_regs\n"
        ".type mt_cfi_regs, @function\n"
        "mt_cfi_regs:\n"
        "  movq (%rsp), %rax\n"
        "  movq %rax, (%rdi)\n"
        "  leaq 8(%rsp), %rax\n"
        "  movq %rax, 8(%rdi)\n"
        "  movq %rbp, 16(%rdi)\n"
        "  ret\n"
        ".size mt_cfi_regs, .-mt_cfi_regs\n");

static uint64_t uleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end && shift < 64) {
        b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A pointer in encoding enc at *p: absolute, or relative to its own address (pcrel) or to base
 * (datarel). Indirect pointers are read as their address (only skipped here). -1 on any other. */
static int encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, uintptr_t base,
                   uintptr_t *out)
{
    /* The fixed sizes by the low four bits: absptr, udata2/4/8, sdata2/4/8 (signed: bit 3). */
    static const uint8_t sizes[16] = {
        [0x0] = 8, [0x2] = 2, [0x3] = 4, [0x4] = 8, [0xa] = 2, [0xb] = 4, [0xc] = 8};
    const uint8_t *at = *p;
    uint64_t v = 0;
    unsigned size = sizes[enc & 0x0f];
    if ((enc & 0x0f) == 0x01) {
        v = uleb(p, end);
    } else if ((enc & 0x0f) == 0x09) {
        v = (uint64_t)sleb(p, end);
    } else {
        if (!size || end - at < (ptrdiff_t)size) return -1;
        memcpy(&v, at, size); /* little-endian */
        if ((enc & 0x08) && size < 8) {
            unsigned shift = 64 - 8 * size;
            v = (uint64_t)((int64_t)(v << shift) >> shift);
        }
        *p += size;
    }
    switch (enc & 0x70) {
    case 0x00:
        break;
    case 0x10:
        v += (uintptr_t)at;
        break;
    case 0x30:
        v += base;
        break;
    default:
        return -1;
    }
    *out = (uintptr_t)v;
    return 0;
}

/* A register's rule while the instructions run: same value, saved at CFA + off, equal to
 * CFA + off, undefined, or one the step cannot follow. */
enum rule { R_SAME, R_AT, R_IS, R_UNDEF, R_OTHER };

struct state {
    int cfa_reg;
    int64_t cfa_off;
    int cfa_other; /* an expression */
    uint8_t rbp, ra;
    int64_t rbp_off, ra_off;
};

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int augmented, signal;
    const uint8_t *insns, *end;
};

static int parse_cie(const uint8_t *p, struct cie *c)
{
    uint32_t len;
    memcpy(&len, p, 4);
    if (len == 0 || len == 0xffffffffu) return -1;
    const uint8_t *end = p + 4 + len;
    p += 8; /* length, CIE id */
    uint8_t version = *p++;
    if (version != 1 && version != 3) return -1;
    const char *aug = (const char *)p;
    size_t aug_len = strnlen(aug, (size_t)(end - p));
    p += aug_len + 1;
    if (strstr(aug, "eh")) return -1;
    *c = (struct cie){.fde_enc = 0, .end = end};
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    c->ra_reg = version == 1 ? *p++ : uleb(&p, end);
    if (aug[0] == 'z') {
        c->augmented = 1;
        uint64_t n = uleb(&p, end);
        const uint8_t *data_end = p + n, *q = p;
        for (const char *a = aug + 1; *a; a++) {
            uintptr_t skip = 0;
            if (*a == 'R') {
                c->fde_enc = *q++;
            } else if (*a == 'L') {
                q++;
            } else if (*a == 'P') {
                uint8_t enc = *q++;
                if (encoded(&q, data_end, enc & (uint8_t)~DW_EH_PE_indirect, 0, &skip) != 0)
                    return -1;
            } else if (*a == 'S') {
                c->signal = 1;
            } else {
                return -1;
            }
        }
        p = data_end;
    } else if (aug[0]) {
        return -1;
    }
    c->insns = p;
    return p <= end ? 0 : -1;
}

static void set_rule(struct state *s, uint64_t reg, uint8_t rule, int64_t off, uint64_t ra_reg)
{
    if (reg == MT_DWARF_RBP) {
        s->rbp = rule;
        s->rbp_off = off;
    } else if (reg == ra_reg) {
        s->ra = rule;
        s->ra_off = off;
    }
}

static void restore_rule(struct state *s, uint64_t reg, const struct state *init, uint64_t ra_reg)
{
    if (reg == MT_DWARF_RBP)
        set_rule(s, reg, init->rbp, init->rbp_off, ra_reg);
    else if (reg == ra_reg)
        set_rule(s, reg, init->ra, init->ra_off, ra_reg);
}

#define STATES 8

/* Runs the instructions in [p, end) from location loc, stopping before the first row past
 * target. init: the state after the CIE's instructions (for DW_CFA_restore), or NULL while they
 * run. Returns 0, or -1 on an instruction it does not know or a state stack overflow. */
static int run(const uint8_t *p, const uint8_t *end, uintptr_t loc, uintptr_t target,
               const struct cie *c, struct state *s, const struct state *init)
{
    struct state saved[STATES];
    int depth = 0;
    while (p < end) {
        uint8_t op = *p++, low = op & 0x3f;
        uint64_t reg, delta = 0;
        int64_t off;
        uintptr_t to = 0;
        switch (op >> 6) {
        case 1:
            delta = low * c->code_align;
            goto advance;
        case 2:
            off = (int64_t)uleb(&p, end) * c->data_align;
            set_rule(s, low, R_AT, off, c->ra_reg);
            continue;
        case 3:
            if (!init) return -1;
            restore_rule(s, low, init, c->ra_reg);
            continue;
        }
        switch (op) {
        case 0x00:
            break; /* nop */
        case 0x01: /* set_loc */
            if (encoded(&p, end, c->fde_enc, 0, &to) != 0) return -1;
            if (to > target) return 0;
            loc = to;
            break;
        case 0x02:
            delta = *p++ * c->code_align;
            goto advance;
        case 0x03: /* advance_loc2 and advance_loc4: a udata2 or udata4 */
        case 0x04:
            if (encoded(&p, end, op == 0x03 ? 0x02 : 0x03, 0, &to) != 0) return -1;
            delta = to * c->code_align;
            goto advance;
        case 0x05: /* offset_extended */
            reg = uleb(&p, end);
            set_rule(s, reg, R_AT, (int64_t)uleb(&p, end) * c->data_align, c->ra_reg);
            break;
        case 0x06: /* restore_extended */
            reg = uleb(&p, end);
            if (!init) return -1;
            restore_rule(s, reg, init, c->ra_reg);
            break;
        case 0x07:
            set_rule(s, uleb(&p, end), R_UNDEF, 0, c->ra_reg);
            break;
        case 0x08:
            set_rule(s, uleb(&p, end), R_SAME, 0, c->ra_reg);
            break;
        case 0x09: /* register */
            reg = uleb(&p, end);
            uleb(&p, end);
            set_rule(s, reg, R_OTHER, 0, c->ra_reg);
            break;
        case 0x0a:
            if (depth == STATES) return -1;
            saved[depth++] = *s;
            break;
        case 0x0b:
            if (!depth) return -1;
            *s = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            s->cfa_reg = (int)uleb(&p, end);
            s->cfa_off = (int64_t)uleb(&p, end);
            s->cfa_other = 0;
            break;
        case 0x0d:
            s->cfa_reg = (int)uleb(&p, end);
            break;
        case 0x0e:
            s->cfa_off = (int64_t)uleb(&p, end);
            break;
        case 0x0f: /* def_cfa_expression */
            s->cfa_other = 1;
            p += uleb(&p, end);
            break;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p, end);
            p += uleb(&p, end);
            set_rule(s, reg, R_OTHER, 0, c->ra_reg);
            break;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p, end);
            set_rule(s, reg, R_AT, sleb(&p, end) * c->data_align, c->ra_reg);
            break;
        case 0x12: /* def_cfa_sf */
            s->cfa_reg = (int)uleb(&p, end);
            s->cfa_off = sleb(&p, end) * c->data_align;
            s->cfa_other = 0;
            break;
        case 0x13:
            s->cfa_off = sleb(&p, end) * c->data_align;
            break;
        case 0x14: /* val_offset */
            reg = uleb(&p, end);
            set_rule(s, reg, R_IS, (int64_t)uleb(&p, end) * c->data_align, c->ra_reg);
            break;
        case 0x15: /* val_offset_sf */
            reg = uleb(&p, end);
            set_rule(s, reg, R_IS, sleb(&p, end) * c->data_align, c->ra_reg);
            break;
        case 0x2e:
            uleb(&p, end);
            break; /* GNU_args_size */
        case 0x2f: /* GNU_negative_offset_extended */
            reg = uleb(&p, end);
            set_rule(s, reg, R_AT, -(int64_t)uleb(&p, end) * c->data_align, c->ra_reg);
            break;
        default:
            return -1;
        }
        continue;
    advance:
        if (loc + delta > target) return 0;
        loc += delta;
    }
    return 0;
}

static int fits(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

/* The row of the code at `at`: pc - 1 for a return address pc (inside the call), pc itself for
 * an interrupted thread's. */
static struct row find_row(uintptr_t pc, uintptr_t at)
{
    struct row r = {.pc = pc, .how = HOW_GIVE_UP};
    struct dl_find_object obj;
    if (_dl_find_object((void *)at, &obj) != 0) {
        r.how = HOW_NO_OBJECT;
        return r;
    }
    const uint8_t *hdr = obj.dlfo_eh_frame, *p = hdr;
    if (!hdr || hdr[0] != 1 || hdr[3] != 0x3b) return r; /* table: datarel sdata4 pairs */
    p += 4;
    uintptr_t eh_frame = 0, count = 0;
    if (encoded(&p, p + 8, hdr[1], (uintptr_t)hdr, &eh_frame) != 0 ||
        encoded(&p, p + 8, hdr[2], (uintptr_t)hdr, &count) != 0 || !count)
        return r;
    const int32_t *table = (const int32_t *)p;
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)hdr + (intptr_t)table[2 * mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    if ((uintptr_t)hdr + (intptr_t)table[2 * lo] > at) return r;
    const uint8_t *fde = hdr + table[2 * lo + 1];
    uint32_t len, cie_off;
    memcpy(&len, fde, 4);
    memcpy(&cie_off, fde + 4, 4);
    if (len == 0 || len == 0xffffffffu || !cie_off) return r;
    const uint8_t *fde_end = fde + 4 + len;
    struct cie c;
    if (parse_cie(fde + 4 - cie_off, &c) != 0 || c.signal) return r;
    p = fde + 8;
    uintptr_t begin = 0, range = 0;
    if (encoded(&p, fde_end, c.fde_enc, 0, &begin) != 0 ||
        encoded(&p, fde_end, c.fde_enc & 0x0f, 0, &range) != 0 || at < begin || at - begin >= range)
        return r;
    if (c.augmented) p += uleb(&p, fde_end);
    struct state init = {.cfa_reg = MT_DWARF_RSP, .rbp = R_SAME, .ra = R_SAME}, s;
    if (run(c.insns, c.end, begin, (uintptr_t)-1, &c, &init, NULL) != 0) return r;
    s = init;
    if (run(p, fde_end, begin, at, &c, &s, &init) != 0) return r;
    if (s.cfa_other || (s.cfa_reg != MT_DWARF_RSP && s.cfa_reg != MT_DWARF_RBP) ||
        !fits(s.cfa_off, INT32_MIN, INT32_MAX))
        return r;
    if (s.ra == R_UNDEF) {
        r.how = HOW_LAST;
        return r;
    }
    if (s.ra != R_AT || !fits(s.ra_off, INT16_MIN, INT16_MAX) ||
        !fits(s.rbp_off, INT16_MIN, INT16_MAX))
        return r;
    static const uint8_t rbp_rules[] = {[R_SAME] = RBP_SAME,
                                        [R_AT] = RBP_AT,
                                        [R_IS] = RBP_IS,
                                        [R_UNDEF] = RBP_END,
                                        [R_OTHER] = RBP_LOST};
    r.how = HOW_STEP;
    r.cfa_on_rbp = s.cfa_reg == MT_DWARF_RBP;
    r.cfa_off = (int32_t)s.cfa_off;
    r.ra_off = (int16_t)s.ra_off;
    r.rbp_rule = rbp_rules[s.rbp];
    r.rbp_off = (int16_t)s.rbp_off;
    return r;
}

static inline struct row row_for(struct mt_cfi_rows *rows, uintptr_t pc)
{
    if (!rows) return find_row(pc, pc - 1);
    struct row *r = &rows->row[(pc * 0x9E3779B97F4A7C15ull) >> (64 - ROWS_BITS)];
    if (r->pc == pc) return *r;
    struct row found = find_row(pc, pc - 1);
    if (found.how != HOW_NO_OBJECT) *r = found;
    return found;
}

/* A stack word at a, inside [lo, hi) and aligned. */
static inline int word_at(uintptr_t a, uintptr_t lo, uintptr_t hi, uintptr_t *v)
{
    if (a < lo || a > hi - sizeof(uintptr_t) || (a & 7)) return 0;
    *v = *(const uintptr_t *)a;
    return 1;
}

/* The registers of a walk: where it is, and RBP as far as the rows keep it. */
struct walk {
    uintptr_t pc, sp, rbp, rbp_at, cfa;
    int rbp_known;
};

enum { STEP_ON, STEP_END, STEP_GIVE_UP };

/* One step by row r (HOW_STEP) from the frame at w->pc to its caller, reading the stack in
 * [lo, hi): STEP_ON, or STEP_END where the stack ends (w->cfa: the frame's), or STEP_GIVE_UP. */
static inline int step(struct row r, struct walk *w, uintptr_t lo, uintptr_t hi)
{
    if (r.cfa_on_rbp && !w->rbp_known) return STEP_GIVE_UP;
    uintptr_t cfa = (r.cfa_on_rbp ? w->rbp : w->sp) + (uintptr_t)(intptr_t)r.cfa_off, ra;
    if (cfa <= w->sp || !word_at(cfa + (uintptr_t)(intptr_t)r.ra_off, lo, hi, &ra))
        return STEP_GIVE_UP;
    w->cfa = cfa;
    if (r.rbp_rule == RBP_AT) {
        w->rbp_at = cfa + (uintptr_t)(intptr_t)r.rbp_off;
        if (!word_at(w->rbp_at, lo, hi, &w->rbp)) return STEP_GIVE_UP;
    } else if (r.rbp_rule == RBP_IS) {
        w->rbp = cfa + (uintptr_t)(intptr_t)r.rbp_off;
        w->rbp_at = 0;
    } else if (r.rbp_rule == RBP_LOST) {
        w->rbp_known = 0;
    } else if (r.rbp_rule == RBP_END) {
        return STEP_END;
    }
    if (!ra) return STEP_END;
    w->pc = ra;
    w->sp = cfa;
    return STEP_ON;
}

int mt_cfi_backtrace(struct mt_cfi_rows *rows, uintptr_t stack_hi, uintptr_t *ips, uintptr_t *sps,
                     int max, struct mt_cfi_jit *jit)
{
    uintptr_t regs[3];
    mt_cfi_regs(regs);
    struct walk w = {.pc = regs[0], .sp = regs[1], .rbp = regs[2], .rbp_known = 1};
    uintptr_t lo = w.sp;
    if (jit) jit->found = 0;
    int n = 0;
    if (rows) {
        unsigned now = __atomic_load_n(&unloads, __ATOMIC_ACQUIRE);
        if (rows->generation != now) {
            memset(rows->row, 0, sizeof rows->row);
            rows->generation = now;
        }
    }
    while (n < max) {
        ips[n] = w.pc;
        sps[n++] = w.sp;
        struct row r = row_for(rows, w.pc);
        if (r.how == HOW_LAST) break;
        /* libunwind goes on from code in no object along RBP, when RBP is at most 16 KiB above
         * the stack pointer; else the stack ends there. Its guesses are libunwind's to make. */
        if (r.how == HOW_NO_OBJECT) {
            if (jit && w.rbp_known && jit->follow()) {
                jit->found = 1;
                jit->rbp = w.rbp;
                jit->rbp_at = w.rbp_at;
                break;
            }
            if (w.rbp_known && (!w.rbp || w.rbp < w.sp || w.rbp - w.sp > 0x4000)) break;
            return -1;
        }
        if (r.how != HOW_STEP) return -1;
        int how = step(r, &w, lo, stack_hi);
        if (how == STEP_GIVE_UP) return -1;
        if (how == STEP_END) break;
    }
    return n;
}

int mt_cfi_frames(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uintptr_t hi, uintptr_t *ips,
                  uintptr_t *tops, int max)
{
    struct walk w = {.pc = pc, .sp = sp, .rbp = rbp, .rbp_known = 1};
    uintptr_t lo = sp;
    int n = 0;
    while (n < max) {
        struct row r = n ? find_row(w.pc, w.pc - 1) : find_row(w.pc, w.pc);
        if (r.how == HOW_LAST) {
            ips[n] = w.pc;
            tops[n++] = hi;
            break;
        }
        if (r.how != HOW_STEP) break;
        uintptr_t at = w.pc;
        int how = step(r, &w, lo, hi);
        if (how == STEP_GIVE_UP) break;
        ips[n] = at;
        tops[n++] = w.cfa;
        if (how == STEP_END) break;
    }
    return n;
}
