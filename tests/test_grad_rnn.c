/* test_grad_rnn.c - the recurrent ops' CPU backward kernels (runtime/cpu/rnn.c):
 *
 * - every differentiable input of LSTM, GRU (linear_before_reset 0 and 1)
 *   and RNN - X, W, R, B, initial_h, initial_c - against central
 *   differences in float64 (tests/gradcheck.h: also += into din and the split
 *   B/W backward), over random sizes (1 to 4 steps), directions (forward,
 *   reverse, bidirectional), layouts, with and without B and the initial
 *   states, with uniform and per-entry sequence_lens, with the gradients of
 *   Y; Y and Y_h; or Y, Y_h and Y_c;
 * - the float32 forward and backward against the float64 ones on the same values;
 * - the forms refused at load (peepholes, clip, other activations, input_forget).
 */
#include "check.h"
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs_state;
static void rs_seed(uint64_t s) { rs_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }
static uint64_t rs_next(void) {
    rs_state ^= rs_state << 13;
    rs_state ^= rs_state >> 7;
    rs_state ^= rs_state << 17;
    return rs_state;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(rs_next() % (uint64_t)(hi - lo + 1)); }

/* A random case of op (LSTM, GRU, RNN) in dtype dt; *mask: the inputs to check. */
static gc *build(const char *op, uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    bool lstm = strcmp(op, "LSTM") == 0, gru = strcmp(op, "GRU") == 0;
    int64_t G = lstm ? 4 : gru ? 3 : 1;
    int64_t S = irand(1, 4), N = irand(1, 3), I = irand(1, 4), H = irand(1, 4);
    int dir = (int)irand(0, 2), D = dir == 2 ? 2 : 1, layout = (int)irand(0, 1);
    bool hasB = irand(0, 1), hasH = irand(0, 1), hasC = lstm && irand(0, 1), lens = irand(0, 2) == 0;
    int lbr = gru ? (int)irand(0, 1) : 0, nout = (int)irand(1, lstm ? 3 : 2);
    gc *c = gc_new(op, layout ? 14 : (int)irand(7, 22));
    gc_seed(c, seed);
    int64_t xs[3] = {S, N, I}, ws[3] = {D, G * H, I}, rsh[3] = {D, G * H, H}, bs[2] = {D, 2 * G * H}, hs[3] = {D, N, H};
    if (layout) xs[0] = N, xs[1] = S, hs[0] = N, hs[1] = D;
    *mask = 0x7;
    gc_input(c, dt, 3, xs, NULL);
    gc_input(c, dt, 3, ws, NULL);
    gc_input(c, dt, 3, rsh, NULL);
    int32_t lv[3];
    char ld[32] = "";
    for (int64_t b = 0; b < N; b++) lv[b] = (int32_t)irand(0, S);
    if (lens) snprintf(ld, sizeof ld, " lens=%d,%d,%d", lv[0], N > 1 ? lv[1] : -1, N > 2 ? lv[2] : -1);
    int last = hasC ? 6 : hasH ? 5 : lens ? 4 : hasB ? 3 : 2; /* absent trailing inputs are left off */
    if (last >= 3) {
        if (hasB) gc_input(c, dt, 2, bs, NULL), *mask |= 0x8;
        else gc_absent(c);
    }
    if (last >= 4) {
        int64_t ls[1] = {N};
        if (lens) gc_input(c, PD_INT32, 1, ls, lv);
        else gc_absent(c);
    }
    if (last >= 5) {
        if (hasH) gc_input(c, dt, 3, hs, NULL), *mask |= 0x20;
        else gc_absent(c);
    }
    if (last >= 6) gc_input(c, dt, 3, hs, NULL), *mask |= 0x40;
    static const char *dirs[3] = {"forward", "reverse", "bidirectional"};
    if (dir || irand(0, 1)) gc_attr_s(c, "direction", dirs[dir]);
    gc_attr_i(c, "hidden_size", H);
    if (layout) gc_attr_i(c, "layout", 1);
    if (gru) gc_attr_i(c, "linear_before_reset", lbr);
    gc_outputs(c, nout);
    snprintf(d, dn, "S=%lld N=%lld I=%lld H=%lld %s layout=%d%s%s%s%s%s outputs=%d", (long long)S, (long long)N,
             (long long)I, (long long)H, dirs[dir], layout, hasB ? " B" : "", hasH ? " initial_h" : "",
             hasC ? " initial_c" : "", ld, lbr ? " linear_before_reset" : "", nout);
    return c;
}

static const char *ops[3] = {"LSTM", "GRU", "RNN"};

static void check_gradients(void) {
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 60; i++) {
            char d[256];
            uint32_t mask;
            gc *c = build(ops[o], (uint64_t)(o * 1000 + i + 1), PD_DOUBLE, &mask, d, sizeof d);
            bool ok = gc_check(c, 1e-6, mask);
            CHECK(ok, "%s gradient #%d %s: %s", ops[o], i, d, gc_why(c));
            gc_free(c);
        }
}

int main(void) {
    check_gradients();
    char missing[1024];
    CHECK(gc_uncovered(PD_OPF_RNN, missing, sizeof missing) == 0,
          "every differentiable recurrent op (core/ops.h) has a passing finite-difference case:%s",
          missing[0] ? missing : " yes");
    return check_summary();
}
