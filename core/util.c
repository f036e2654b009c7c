/* util.c - errors, dtypes, element access and the small helpers every layer uses.
 *
 * The last error is per thread (like errno): a library call that fails sets it,
 * pd_last_error() reads it. No other mutable state is global.
 */
#include "pd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* C11's _Thread_local; the same in C++ (the implementation compiles as either) */
#ifdef __cplusplus
#define PD__THREAD_LOCAL thread_local
#else
#define PD__THREAD_LOCAL _Thread_local
#endif
static PD__THREAD_LOCAL char pd__errbuf[1024];

const char *pd__escape(char *dst, size_t n, const char *src) {
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    if (n == 0) return dst;
    for (const unsigned char *p = (const unsigned char *)(src ? src : ""); *p; p++) {
        char e[5] = {(char)*p, 0, 0, 0, 0};
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            e[0] = '\\';
            e[1] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (*p < 0x20 || *p == 0x7f) {
            e[0] = '\\', e[1] = 'x', e[2] = hex[*p >> 4], e[3] = hex[*p & 15];
        }
        size_t len = strlen(e);
        if (k + len >= n) break; /* an escape is never cut in half */
        memcpy(dst + k, e, len);
        k += len;
    }
    dst[k] = '\0';
    return dst;
}

/* Messages are one line whatever the model's names hold: the formatted text
 * is escaped (pd__escape), so a newline in a node name cannot forge a second
 * line and an ESC cannot drive the terminal. Escaping twice changes nothing.
 * Formatted into a local buffer first: an argument may be pd_last_error()
 * itself (a caller adding context), which the buffer being written holds. */
pd_status pd__err(pd_status s, const char *fmt, ...) {
    char msg[sizeof pd__errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pd__escape(pd__errbuf, sizeof pd__errbuf, msg);
    return s;
}

void pd__err_prefix(const char *fmt, ...) {
    char old[sizeof pd__errbuf], pre[512], msg[sizeof pd__errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, pd__errbuf, sizeof old);
    snprintf(msg, sizeof msg, "%s: %s", pre, old);
    pd__escape(pd__errbuf, sizeof pd__errbuf, msg);
}

const char *pd_last_error(void) { return pd__errbuf; }

static void pd__trace_sep(pd__trace *t) {
    if (t->more) fputs(",\n", t->f);
    t->more = true;
}

void pd__trace_name(pd__trace *t, int pid, int tid, const char *name) {
    pd__trace_sep(t);
    if (tid < 0)
        fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}", pid, name);
    else
        fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", pid,
                tid, name);
}

void pd__trace_event(pd__trace *t, const char *name, const char *cat, double ts_us, double dur_us, int pid, int tid,
                     const char *args) {
    pd__trace_sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"cat\":\"%s\",", name, cat);
    if (dur_us >= 0) fprintf(t->f, "\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,", ts_us, dur_us);
    else fprintf(t->f, "\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,", ts_us);
    fprintf(t->f, "\"pid\":%d,\"tid\":%d%s%s%s}", pid, tid, args ? ",\"args\":{" : "", args ? args : "", args ? "}" : "");
}

void pd__trace_counter(pd__trace *t, const char *name, double ts_us, int pid, const char *args) {
    pd__trace_sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{%s}}", name, ts_us, pid, args);
}

/* One rule for every options struct of pipedream.h: `size` first, set by
 * its _INIT macro. A program built against an older header passes a shorter
 * struct and gets the defaults for the fields it never knew; one built
 * against a newer header is refused (its new fields would be ignored). */
pd_status pd__opts_read(void *out, const void *opt, size_t full, const char *what) {
    if (!opt) return PD_OK;
    size_t n = *(const size_t *)opt;
    if (n < sizeof(size_t) || n > full)
        return pd__err(PD_ERR_INVALID, "%s: size is %zu; this library's struct has %zu bytes (start from its _INIT macro)",
                       what, n, full);
    memcpy(out, opt, n);
    *(size_t *)out = full;
    return PD_OK;
}

const char *pd_version(void) { return PD_VERSION_STRING; }

const char *pd_status_name(pd_status s) {
    switch (s) {
    case PD_OK: return "ok";
    case PD_ERR_IO: return "i/o error";
    case PD_ERR_PARSE: return "parse error";
    case PD_ERR_UNSUPPORTED: return "unsupported";
    case PD_ERR_SHAPE: return "shape error";
    case PD_ERR_INVALID: return "invalid";
    case PD_ERR_NOMEM: return "out of memory";
    case PD_ERR_NUMERIC: return "numeric error";
    case PD_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *pd_dtype_name(pd_dtype t) {
    switch (t) {
    case PD_FLOAT: return "float32";
    case PD_UINT8: return "uint8";
    case PD_INT8: return "int8";
    case PD_UINT16: return "uint16";
    case PD_INT16: return "int16";
    case PD_INT32: return "int32";
    case PD_INT64: return "int64";
    case PD_STRING: return "string";
    case PD_BOOL: return "bool";
    case PD_FLOAT16: return "float16";
    case PD_DOUBLE: return "float64";
    case PD_UINT32: return "uint32";
    case PD_UINT64: return "uint64";
    case PD_BFLOAT16: return "bfloat16";
    case PD_FLOAT8E4M3FN: return "float8e4m3fn";
    case PD_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case PD_FLOAT8E5M2: return "float8e5m2";
    case PD_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    case PD_UINT4: return "uint4";
    case PD_INT4: return "int4";
    case PD_FLOAT4E2M1: return "float4e2m1";
    case PD_FLOAT8E8M0: return "float8e8m0";
    case PD_UINT2: return "uint2";
    case PD_INT2: return "int2";
    case PD_UNDEFINED: break;
    }
    return "undefined";
}

size_t pd_dtype_size(pd_dtype t) {
    switch (t) {
    case PD_UINT8: case PD_INT8: case PD_BOOL: return 1;
    case PD_FLOAT8E4M3FN: case PD_FLOAT8E4M3FNUZ: case PD_FLOAT8E5M2: case PD_FLOAT8E5M2FNUZ:
    case PD_UINT4: case PD_INT4: case PD_FLOAT4E2M1: case PD_FLOAT8E8M0: case PD_UINT2: case PD_INT2: return 1;
    case PD_UINT16: case PD_INT16: case PD_FLOAT16: case PD_BFLOAT16: return 2;
    case PD_FLOAT: case PD_INT32: case PD_UINT32: return 4;
    case PD_INT64: case PD_DOUBLE: case PD_UINT64: return 8;
    default: return 0;
    }
}

int64_t pd_tensor_numel(const pd_tensor *t) { return t ? pd__shape_numel(t->ndim, t->shape) : 0; }

void pd_tensor_free(pd_tensor *t) {
    if (!t) return;
    PD_FREE(t->data);
    t->data = NULL;
}

char *pd__strdup(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *d = (char *)PD_MALLOC(n);
    if (d) memcpy(d, s, n);
    return d;
}

bool pd__mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

int64_t pd__shape_numel(int ndim, const int64_t *shape) {
    /* the product of the non-zero dims must fit too: [0, 2^62, 2^62] holds no
     * element, but its rows (a product of some dims) would overflow */
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (!pd__mul_ok(n, shape[i], &n)) return -1;
    }
    return empty ? 0 : n;
}

void pd__format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "[");
    for (int i = 0; i < ndim; i++)
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(buf + k, k < n ? n - k : 0, "]");
}

/* IEEE half and bfloat16, round to nearest even. */
float pd__half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pd__float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow after rounding */
    if (absx < 0x38800000u) { /* subnormal half or zero */
        if (absx < 0x33000000u) return sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        int shift = (int)(126 - e); /* half subnormal unit is 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float pd__bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pd__float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

/* ---- float8, float4, int4, int2 ------------------------------------------------ */
bool pd__dtype_lowbit(pd_dtype t) { return t >= PD_FLOAT8E4M3FN && t <= PD_INT2; }

int pd__dtype_bits(pd_dtype t) {
    switch (t) {
    case PD_UINT4: case PD_INT4: case PD_FLOAT4E2M1: return 4;
    case PD_UINT2: case PD_INT2: return 2;
    default: return 8 * (int)pd_dtype_size(t);
    }
}

/* A small float format: exponent and mantissa widths, bias, and which codes
 * are special. IEEE: all-ones exponent is inf (m = 0) or NaN, like E5M2. FN:
 * only all-ones is NaN, no inf (E4M3FN). UZ: 0x80 (negative zero) is the one
 * NaN, no -0 and no inf. NONE: every code is finite (E2M1). */
enum { PD_MF_IEEE, PD_MF_FN, PD_MF_UZ, PD_MF_NONE };
typedef struct pd__mfmt {
    int eb, mb, bias, kind;
    uint8_t maxc; /* the largest finite magnitude's code */
} pd__mfmt;

static const pd__mfmt *mf_of(pd_dtype t) {
    static const pd__mfmt e4m3fn = {4, 3, 7, PD_MF_FN, 0x7e}, e4m3fnuz = {4, 3, 8, PD_MF_UZ, 0x7f},
                          e5m2 = {5, 2, 15, PD_MF_IEEE, 0x7b}, e5m2fnuz = {5, 2, 16, PD_MF_UZ, 0x7f},
                          e2m1 = {2, 1, 1, PD_MF_NONE, 0x7};
    switch (t) {
    case PD_FLOAT8E4M3FN: return &e4m3fn;
    case PD_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case PD_FLOAT8E5M2: return &e5m2;
    case PD_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    case PD_FLOAT4E2M1: return &e2m1;
    default: return NULL;
    }
}

static double mf_decode(const pd__mfmt *f, unsigned c) {
    unsigned sbit = 1u << (f->eb + f->mb), emask = (1u << f->eb) - 1, mmask = (1u << f->mb) - 1;
    unsigned e = (c >> f->mb) & emask, m = c & mmask;
    if (f->kind == PD_MF_UZ && c == sbit) return NAN;
    if (f->kind == PD_MF_IEEE && e == emask) return m ? NAN : (c & sbit) ? -INFINITY : INFINITY;
    if (f->kind == PD_MF_FN && e == emask && m == mmask) return NAN;
    double v = e ? ldexp((double)(m | (1u << f->mb)), (int)e - f->bias - f->mb) : ldexp((double)m, 1 - f->bias - f->mb);
    return (c & sbit) ? -v : v;
}

/* Rounds to float32 first, as ml_dtypes does (a double just above a tie
 * becomes the tie; float32 and float16 sources are exact), then to nearest
 * even, then saturates or overflows; what a NaN, an overflow and a negative
 * zero become follows ml_dtypes too, which ONNX's reference uses. */
static uint8_t mf_encode(const pd__mfmt *f, double v, bool sat) {
    v = (float)v;
    unsigned sbit = 1u << (f->eb + f->mb), sign = signbit(v) ? sbit : 0;
    /* E2M1 has no NaN: ml_dtypes gives a zero of the opposite sign */
    unsigned nan = f->kind == PD_MF_UZ ? sbit : f->kind == PD_MF_FN ? sign | (sbit - 1)
                   : f->kind == PD_MF_IEEE ? sign | (((1u << f->eb) - 1) << f->mb) | (1u << (f->mb - 1)) : sign ^ sbit;
    if (v != v) return (uint8_t)nan;
    double a = fabs(v), max = mf_decode(f, f->maxc);
    if (f->kind == PD_MF_NONE) sat = true;
    unsigned over = sat ? sign | f->maxc : f->kind == PD_MF_IEEE ? sign | (((1u << f->eb) - 1) << f->mb) : nan;
    if (a > 2 * max) return (uint8_t)over; /* inf too; keeps ldexp below in range */
    int emin = 1 - f->bias, e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (e < emin) e = emin;
    double q = nearbyint(ldexp(a, f->mb - e)), r = ldexp(q, e - f->mb);
    if (r > max) return (uint8_t)over;
    if (r == 0) return (uint8_t)(f->kind == PD_MF_UZ ? 0 : sign);
    if (r < ldexp(1, emin)) return (uint8_t)(sign | (unsigned)q); /* subnormal */
    frexp(r, &e);
    e -= 1;
    unsigned m = (unsigned)ldexp(r, f->mb - e) - (1u << f->mb);
    return (uint8_t)(sign | ((unsigned)(e + f->bias) << f->mb) | m);
}

/* float8e8m0 is an exponent alone (2^(c-127), 0xff NaN), made as ONNX's
 * to_float8e8m0 makes it from the float32's bits: the sign is dropped, and
 * round_mode decides whether a mantissa rounds the exponent up. */
static uint8_t e8m0_encode(double v, bool sat, int mode) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t e = (b >> 23) & 0xff;
    if (e == 0xff) return 0xff;
    bool up = false;
    if (mode == PD_RM_NEAREST) {
        bool g = b & 0x400000, r = b & 0x200000, s = b & 0x1fffff, lsb = e > 0;
        up = g && (r || s || lsb);
    } else if (mode == PD_RM_UP) {
        up = (b & 0x7fffff) != 0;
    }
    if (up && sat && e == 0xfe) up = false;
    return (uint8_t)(e + up);
}

double pd__lowfloat_decode(pd_dtype t, uint8_t c) {
    if (t == PD_FLOAT8E8M0) return c == 0xff ? NAN : ldexp(1.0, (int)c - 127);
    const pd__mfmt *f = mf_of(t);
    return f ? mf_decode(f, c) : 0;
}

uint8_t pd__lowfloat_encode(pd_dtype t, double v, bool saturate, int round_mode) {
    if (t == PD_FLOAT8E8M0) return e8m0_encode(v, saturate, round_mode);
    const pd__mfmt *f = mf_of(t);
    return f ? mf_encode(f, v, saturate) : 0;
}

/* Integers of 4 and 2 bits keep their low bits (two's complement for the
 * signed ones), as Cast does between integer types. */
static int8_t low_int_wrap(pd_dtype t, int64_t v) {
    switch (t) {
    case PD_INT4: return (int8_t)((int)((v & 0xf) ^ 0x8) - 0x8);
    case PD_UINT4: return (int8_t)(v & 0xf);
    case PD_INT2: return (int8_t)((int)((v & 0x3) ^ 0x2) - 0x2);
    default: return (int8_t)(v & 0x3);
    }
}

static bool low_int(pd_dtype t) { return t == PD_INT4 || t == PD_UINT4 || t == PD_INT2 || t == PD_UINT2; }

/* The 4- and 2-bit types are packed in files, low bits first, the last byte
 * part used when the count does not fill it. */
void pd__unpack_bits(pd_dtype t, const uint8_t *src, int64_t n, int8_t *dst) {
    int bits = pd__dtype_bits(t), per = 8 / bits;
    unsigned mask = (1u << bits) - 1, sbit = 1u << (bits - 1);
    bool sgn = t == PD_INT4 || t == PD_INT2;
    for (int64_t i = 0; i < n; i++) {
        unsigned c = (src[i / per] >> ((i % per) * bits)) & mask;
        dst[i] = (int8_t)(sgn ? (int)(c ^ sbit) - (int)sbit : (int)c);
    }
}

void pd__pack_bits(pd_dtype t, const int8_t *src, int64_t n, uint8_t *dst) {
    int bits = pd__dtype_bits(t), per = 8 / bits;
    unsigned mask = (1u << bits) - 1;
    memset(dst, 0, (size_t)((n * bits + 7) / 8));
    for (int64_t i = 0; i < n; i++) dst[i / per] |= (uint8_t)(((unsigned)src[i] & mask) << ((i % per) * bits));
}

double pd__get_f(pd_dtype t, const void *p, int64_t i) {
    switch (t) {
    case PD_FLOAT: return ((const float *)p)[i];
    case PD_DOUBLE: return ((const double *)p)[i];
    case PD_FLOAT16: return pd__half_to_float(((const uint16_t *)p)[i]);
    case PD_BFLOAT16: return pd__bf16_to_float(((const uint16_t *)p)[i]);
    case PD_INT8: return ((const int8_t *)p)[i];
    case PD_INT16: return ((const int16_t *)p)[i];
    case PD_INT32: return ((const int32_t *)p)[i];
    case PD_INT64: return (double)((const int64_t *)p)[i];
    case PD_UINT8: return ((const uint8_t *)p)[i];
    case PD_BOOL: return ((const uint8_t *)p)[i] != 0;
    case PD_UINT16: return ((const uint16_t *)p)[i];
    case PD_UINT32: return ((const uint32_t *)p)[i];
    case PD_UINT64: return (double)((const uint64_t *)p)[i];
    case PD_INT4: case PD_INT2: return ((const int8_t *)p)[i];
    case PD_UINT4: case PD_UINT2: return ((const uint8_t *)p)[i];
    default: return pd__dtype_lowbit(t) ? pd__lowfloat_decode(t, ((const uint8_t *)p)[i]) : 0;
    }
}

int64_t pd__get_i(pd_dtype t, const void *p, int64_t i) {
    switch (t) {
    case PD_INT64: return ((const int64_t *)p)[i];
    case PD_INT32: return ((const int32_t *)p)[i];
    case PD_INT16: return ((const int16_t *)p)[i];
    case PD_INT8: return ((const int8_t *)p)[i];
    case PD_UINT8: return ((const uint8_t *)p)[i];
    case PD_BOOL: return ((const uint8_t *)p)[i] != 0;
    case PD_UINT16: return ((const uint16_t *)p)[i];
    case PD_UINT32: return ((const uint32_t *)p)[i];
    case PD_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case PD_INT4: case PD_INT2: return ((const int8_t *)p)[i];
    case PD_UINT4: case PD_UINT2: return ((const uint8_t *)p)[i];
    default: {
        double v = pd__get_f(t, p, i);
        if (v != v) return 0;
        if (v >= 9.2233720368547758e18) return INT64_MAX;
        if (v <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void pd__set_f(pd_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case PD_FLOAT: ((float *)p)[i] = (float)v; break;
    case PD_DOUBLE: ((double *)p)[i] = v; break;
    case PD_FLOAT16: ((uint16_t *)p)[i] = pd__float_to_half((float)v); break;
    case PD_BFLOAT16: ((uint16_t *)p)[i] = pd__float_to_bf16((float)v); break;
    case PD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case PD_FLOAT8E4M3FN: case PD_FLOAT8E4M3FNUZ: case PD_FLOAT8E5M2: case PD_FLOAT8E5M2FNUZ:
    case PD_FLOAT4E2M1: case PD_FLOAT8E8M0:
        ((uint8_t *)p)[i] = pd__lowfloat_encode(t, v, true, PD_RM_UP);
        break;
    case PD_INT4: case PD_UINT4: case PD_INT2: case PD_UINT2:
        /* truncated, then its low bits; NaN and inf give 0, as ml_dtypes */
        ((int8_t *)p)[i] = low_int_wrap(t, isfinite(v) ? (int64_t)fmod(trunc(v), 16.0) : 0);
        break;
    default: pd__set_i(t, p, i, (v != v) ? 0 : (int64_t)v); break;
    }
}

void pd__set_i(pd_dtype t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case PD_INT64: ((int64_t *)p)[i] = v; break;
    case PD_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case PD_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case PD_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case PD_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case PD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case PD_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case PD_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case PD_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default:
        if (low_int(t)) ((int8_t *)p)[i] = low_int_wrap(t, v);
        else pd__set_f(t, p, i, (double)v);
        break;
    }
}

void *pd__scratch(pd__exec *x, size_t bytes) {
    if (bytes <= x->scratch_size) return x->scratch;
    size_t n = bytes + bytes / 4 + 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0 || !p) {
        pd__err(PD_ERR_NOMEM, "cannot allocate %zu bytes of scratch memory", n);
        return NULL;
    }
    PD_FREE(x->scratch);
    x->scratch = p;
    x->scratch_size = n;
    return p;
}

/* Opens path for reading only if it is a regular file: O_NONBLOCK so that a
 * FIFO or a device cannot block the open, then fstat on what was opened. */
pd_status pd__open_regular(const char *path, int *fd_out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        pd_status s = pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return pd__err(PD_ERR_IO, "%s: not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    return PD_OK;
}

/* A file the program is about to write: absent, or a regular file it may
 * replace, in a folder that exists. Never a folder, a device or a FIFO (the
 * write goes through a temporary and a rename, which would replace the node). */
pd_status pd__check_dest(const char *path) {
    size_t n = strlen(path);
    if (n == 0) return pd__err(PD_ERR_INVALID, "an empty output path");
    if (path[n - 1] == '/') return pd__err(PD_ERR_INVALID, "%s: names a folder, not a file", path);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return pd__err(PD_ERR_INVALID, "%s: is a folder, not a file", path);
        if (!S_ISREG(st.st_mode))
            return pd__err(PD_ERR_INVALID, "%s: not a regular file (a device or a FIFO); refusing to replace it", path);
    } else if (errno != ENOENT) {
        return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    }
    /* the temporary is made in the file's folder */
    char *dir = strdup(path);
    if (!dir) return pd__err(PD_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
    pd_status s = PD_OK;
    if (stat(d, &st) != 0) s = pd__err(PD_ERR_IO, "%s: folder %s: %s", path, d, strerror(errno));
    else if (!S_ISDIR(st.st_mode)) s = pd__err(PD_ERR_IO, "%s: %s is not a folder", path, d);
    else if (access(d, W_OK) != 0) s = pd__err(PD_ERR_IO, "%s: folder %s: %s", path, d, strerror(errno));
    free(dir);
    return s;
}

/* Writes through "<path>.tmp.<pid>", fsync and rename: a reader sees the old
 * file or the whole new one, never half of it. */
pd_status pd__write_atomic(const char *path, const void *data, size_t len) {
    const char *buf = (const char *)data;
    char tmp[4096];
    PD_TRY(pd__check_dest(path));
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return pd__err(PD_ERR_IO, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return PD_OK;
}


/* Reads len bytes at offset, retrying short reads. */
pd_status pd__pread_all(int fd, const char *path, void *data, size_t len, int64_t offset) {
    unsigned char *buf = (unsigned char *)data;
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30;
        ssize_t r = pread(fd, buf + got, want, (off_t)(offset + (int64_t)got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
        }
        if (r == 0) return pd__err(PD_ERR_IO, "%s: file shrank while being read", path);
        got += (size_t)r;
    }
    return PD_OK;
}

/* Reads a whole regular file into a NUL-terminated buffer. */
pd_status pd__read_file(const char *path, unsigned char **buf, size_t *len) {
    int fd;
    struct stat st;
    PD_TRY(pd__open_regular(path, &fd, &st));
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX - 1) {
        close(fd);
        return pd__err(PD_ERR_NOMEM, "%s: file too large", path);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = (unsigned char *)PD_MALLOC(n + 1);
    if (!b) {
        close(fd);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    pd_status s = pd__pread_all(fd, path, b, n, 0);
    close(fd);
    if (s != PD_OK) {
        PD_FREE(b);
        return s;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return PD_OK;
}
