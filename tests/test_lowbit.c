/* test_lowbit.c - the low-bit types' conversions (core/util.c) against the
 * values ml_dtypes and ONNX's reference give (tests/lowbit_ref.h, made by
 * tools/gen_lowbit_ref.py): every code decoded, and encoding where rounding
 * ties, saturation, overflow, zeros and NaNs decide. */
#include "../core/pd_internal.h"
#include "check.h"
#include "lowbit_ref.h"

#include <string.h>

#define N(a) (int)(sizeof(a) / sizeof((a)[0]))

static bool same(double a, double b) { return (a != a && b != b) || (a == b && signbit(a) == signbit(b)); }

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void check_float_type(const char *name, pd_dtype t, const double *dec, int ncodes, const uint32_t *in,
                             const uint8_t *sat, const uint8_t *nosat, int nin) {
    int bad = 0, first = -1;
    for (int c = 0; c < ncodes; c++)
        if (!same(pd__lowfloat_decode(t, (uint8_t)c), dec[c]) && bad++ == 0) first = c;
    CHECK(bad == 0, "%s: %d codes decode as ml_dtypes (%d differ, first code %d)", name, ncodes, bad, first);
    int bs = 0, bn = 0, fs = -1, fn = -1;
    for (int i = 0; i < nin; i++) {
        double v = from_bits(in[i]);
        if (pd__lowfloat_encode(t, v, true, PD_RM_UP) != sat[i] && bs++ == 0) fs = i;
        if (pd__lowfloat_encode(t, v, false, PD_RM_UP) != nosat[i] && bn++ == 0) fn = i;
    }
    CHECK(bs == 0, "%s: %d edge floats encode saturated as the reference (%d differ, first 0x%08x -> %d, want %d)",
          name, nin, bs, fs < 0 ? 0 : in[fs], fs < 0 ? 0 : pd__lowfloat_encode(t, from_bits(in[fs]), true, 0),
          fs < 0 ? 0 : sat[fs]);
    CHECK(bn == 0, "%s: %d edge floats encode unsaturated as ml_dtypes (%d differ, first 0x%08x -> %d, want %d)",
          name, nin, bn, fn < 0 ? 0 : in[fn], fn < 0 ? 0 : pd__lowfloat_encode(t, from_bits(in[fn]), false, 0),
          fn < 0 ? 0 : nosat[fn]);
    /* through the generic element access too */
    uint8_t b = 0;
    pd__set_f(t, &b, 0, pd__get_f(t, &(uint8_t){(uint8_t)(ncodes / 2 - 2)}, 0));
    CHECK(b == (uint8_t)(ncodes / 2 - 2), "%s: pd__set_f(pd__get_f(code)) gives the code back", name);
}

#define FLOAT_TYPE(T)                                                                                              \
    check_float_type(#T, PD_##T, ref_dec_##T, N(ref_dec_##T), ref_in_##T, ref_sat_##T, ref_nosat_##T, N(ref_in_##T))

static void check_e8m0(void) {
    int bad = 0;
    for (int c = 0; c < 256; c++) bad += !same(pd__lowfloat_decode(PD_FLOAT8E8M0, (uint8_t)c), ref_dec_FLOAT8E8M0[c]);
    CHECK(bad == 0, "FLOAT8E8M0: 256 codes decode as ml_dtypes (%d differ)", bad);
    const uint8_t *want[3][2] = {{ref_e8m0_up_0, ref_e8m0_up_1},
                                 {ref_e8m0_down_0, ref_e8m0_down_1},
                                 {ref_e8m0_nearest_0, ref_e8m0_nearest_1}};
    const char *mode[3] = {"up", "down", "nearest"};
    for (int m = 0; m < 3; m++)
        for (int s = 0; s < 2; s++) {
            int nb = 0, first = -1;
            for (int i = 0; i < N(ref_in_FLOAT8E8M0); i++)
                if (pd__lowfloat_encode(PD_FLOAT8E8M0, from_bits(ref_in_FLOAT8E8M0[i]), s, m) != want[m][s][i] &&
                    nb++ == 0)
                    first = i;
            CHECK(nb == 0, "FLOAT8E8M0: round_mode %s, saturate %d as onnx's to_float8e8m0 (%d differ, first #%d)",
                  mode[m], s, nb, first);
        }
}

static void check_int_type(const char *name, pd_dtype t, const float *in, const int *want, int n, int lo, int hi) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int8_t b;
        pd__set_f(t, &b, 0, in[i]);
        if (pd__get_i(t, &b, 0) != want[i]) bad++;
    }
    CHECK(bad == 0, "%s: %d floats convert as ml_dtypes (truncate, keep the low bits; %d differ)", name, n, bad);
    bad = 0;
    for (int v = -40; v <= 40; v++) {
        int8_t b;
        pd__set_i(t, &b, 0, v);
        int64_t got = pd__get_i(t, &b, 0), span = hi - lo + 1, w = ((v - lo) % span + span) % span + lo;
        if (got != w || pd__get_f(t, &b, 0) != (double)w) bad++;
    }
    CHECK(bad == 0, "%s: integers -40..40 wrap into [%d, %d]", name, lo, hi);
}

#define INT_TYPE(T, lo, hi) check_int_type(#T, PD_##T, ref_iin_##T, ref_iout_##T, N(ref_iin_##T), lo, hi)

int main(void) {
    FLOAT_TYPE(FLOAT8E4M3FN);
    FLOAT_TYPE(FLOAT8E4M3FNUZ);
    FLOAT_TYPE(FLOAT8E5M2);
    FLOAT_TYPE(FLOAT8E5M2FNUZ);
    FLOAT_TYPE(FLOAT4E2M1);
    check_e8m0();
    /* a double source rounds to float32 first, as ml_dtypes: 1.0625 + 2^-40
     * becomes the tie 1.0625, which goes to the even 1.0 (0x38), not 1.125 */
    CHECK(pd__lowfloat_encode(PD_FLOAT8E4M3FN, 1.0625 + 0x1p-40, true, PD_RM_UP) == 0x38 &&
              pd__lowfloat_encode(PD_FLOAT8E4M3FN, -1.0625 - 0x1p-40, false, PD_RM_UP) == 0xb8,
          "FLOAT8E4M3FN: a double just above a tie rounds through float32, as ml_dtypes");
    INT_TYPE(INT4, -8, 7);
    INT_TYPE(UINT4, 0, 15);
    INT_TYPE(INT2, -2, 1);
    INT_TYPE(UINT2, 0, 3);
    static const pd_dtype all[] = {PD_FLOAT8E4M3FN, PD_FLOAT8E4M3FNUZ, PD_FLOAT8E5M2, PD_FLOAT8E5M2FNUZ, PD_UINT4,
                                   PD_INT4, PD_FLOAT4E2M1, PD_FLOAT8E8M0, PD_UINT2, PD_INT2};
    int bad = 0;
    for (int i = 0; i < N(all); i++)
        bad += pd_dtype_size(all[i]) != 1 || !pd__dtype_lowbit(all[i]) || !strcmp(pd_dtype_name(all[i]), "undefined");
    CHECK(bad == 0, "the 10 low-bit dtypes are named, one byte each in memory");
    CHECK(pd__dtype_bits(PD_INT4) == 4 && pd__dtype_bits(PD_FLOAT4E2M1) == 4 && pd__dtype_bits(PD_UINT2) == 2 &&
              pd__dtype_bits(PD_FLOAT8E5M2) == 8 && pd__dtype_bits(PD_FLOAT) == 32,
          "bits per element in files: 4, 4, 2, 8, 32");
    return check_summary();
}
