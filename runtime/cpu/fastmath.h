/* fastmath.h - float math without branches, so that the loops using it
 * vectorize (glibc's expf, tanhf and erff are scalar calls, 10-30x slower
 * than memory here): select, exp, tanh, erf. Shared by the element-wise
 * kernels and the loss. Private to the CPU backend.
 */
#ifndef PD_FASTMATH_H
#define PD_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* PD__VEC on a kernel's loop function: built twice on x86-64 Linux, for the
 * baseline (SSE2) and for CPUs with AVX2 (8 floats a vector), the
 * one to run chosen once at load time (GCC's and Clang's target_clones, an
 * ifunc). Floating-point contraction stays off (ISO C), so both clones do
 * the same operations in the same order: the results are the same bits on
 * every x86-64 machine. PD_NO_CLONES turns it off (the fuzzing build: an
 * ifunc resolver must not be instrumented). The math below is always inlined, so that it is
 * compiled for the clone that calls it. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(PD_NO_CLONES) && \
    (defined(__clang__) ? __clang_major__ >= 14 : __GNUC__ >= 8)
#define PD__VEC __attribute__((target_clones("avx2", "default")))
#else
#define PD__VEC
#endif
#define PD__INLINE static inline __attribute__((always_inline))

/* c ? a : b on bits, so the compiler keeps it a select: with ?: GCC
 * threads the constant arm into a branch and the loop stops vectorizing. */
PD__INLINE float pd__self(int c, float a, float b) {
    uint32_t m = -(uint32_t)(c != 0), ab, bb;
    memcpy(&ab, &a, 4);
    memcpy(&bb, &b, 4);
    ab = (ab & m) | (bb & ~m);
    memcpy(&a, &ab, 4);
    return a;
}

PD__INLINE double pd__seld(int c, double a, double b) {
    uint64_t m = -(uint64_t)(c != 0), ab, bb;
    memcpy(&ab, &a, 8);
    memcpy(&bb, &b, 8);
    ab = (ab & m) | (bb & ~m);
    memcpy(&a, &ab, 8);
    return a;
}

/* float exp and tanh without branches, so that the loops using them
 * vectorize (glibc's expf / tanhf are scalar calls, 10-30x slower than
 * memory here). exp: Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, and
 * Cephes' expf polynomial (about 1 ulp); 2^k applied in two halves so that
 * subnormal results round once and large x gives inf. NaN stays NaN. */
PD__INLINE float pd__expf(float x) {
    x = pd__self(x < -104.0f, -104.0f, x);
    x = pd__self(x > 88.8f, 88.8f, x);
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float j = x * 1.44269504088896341f + magic, k = j - magic;
    uint32_t jb;
    memcpy(&jb, &j, 4);
    int32_t ki = (int32_t)(jb - 0x4b400000u); /* k, read from j's mantissa */
    float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t k1 = ki / 2, k2 = ki - k1;
    uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return p * s1 * s2;
}

/* tanh: Cephes' odd polynomial below |x| = 0.625, 1 - 2/(e^2|x| + 1) above
 * (both computed on |x|, one selected, x's sign put back: tanh(-0) = -0). */
PD__INLINE float pd__tanhf(float x) {
    float ax = fabsf(x), z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = ax + ax * z * p;
    float big = 1.0f - 2.0f / (pd__expf(2.0f * ax) + 1.0f);
    return copysignf(pd__self(ax < 0.625f, small, big), x);
}

/* erf, within 3 ulp of the true value (tests/test_elementwise.c sweeps it
 * against libm's double erf). |x| < 0.9277: x P(x^2); above: 1 - e^Q(|x|)
 * with Q fitted to log erfc on [0.9277, 4] (past 4, erf is 1 in float), the
 * sign put back. Both polynomials are least-squares fits at Chebyshev nodes
 * (relative error for P, absolute for Q), made for this file. */
PD__INLINE float pd__erff(float x) {
    float ax = fabsf(x), s = x * x, t = pd__self(ax < 4.0f, ax, 4.0f); /* not ?: (a branch: the loop would not vectorize) */
    float p = -5.982480043e-04f;
    p = p * s + 4.991959052e-03f;
    p = p * s - 2.676613529e-02f;
    p = p * s + 1.128181503e-01f;
    p = p * s - 3.761249507e-01f;
    p = p * s + 1.128379150e+00f;
    float q = 1.613661043e-06f;
    q = q * t - 4.558262905e-05f;
    q = q * t + 5.927017410e-04f;
    q = q * t - 4.739904197e-03f;
    q = q * t + 2.636381746e-02f;
    q = q * t - 1.099766811e-01f;
    q = q * t - 6.319387157e-01f;
    q = q * t - 1.130165764e+00f;
    q = q * t + 3.030020814e-04f;
    float big = copysignf(1.0f - pd__expf(q), x);
    return pd__self(x != x, x, pd__self(ax < 0.9277f, x * p, big)); /* NaN stays NaN */
}

#endif
