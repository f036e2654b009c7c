/* npy.c - NumPy .npy files (format versions 1.0, 2.0 and 3.0; C order;
 * little-endian float32, float64, int64, int32, uint8, bool and the other
 * fixed-size numeric types). Writes version 1.0 (2.0 when the header needs it).
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static const struct {
    const char *descr;
    pd_dtype dtype;
} pd__npy_types[] = {
    {"<f4", PD_FLOAT}, {"<f8", PD_DOUBLE}, {"<i8", PD_INT64}, {"<i4", PD_INT32}, {"<i2", PD_INT16},
    {"|i1", PD_INT8},  {"|u1", PD_UINT8},  {"<u2", PD_UINT16}, {"<u4", PD_UINT32}, {"<u8", PD_UINT64},
    {"|b1", PD_BOOL},  {"<f2", PD_FLOAT16},
};

/* Finds the value after 'key': in a Python dict literal. */
static const char *pd__dict_value(const char *h, const char *key) {
    const char *p = strstr(h, key);
    if (!p) return NULL;
    p += strlen(key);
    while (*p == ' ' || *p == '\'' || *p == '"' || *p == ':') p++;
    return p;
}

static pd_status pd__npy_header(FILE *f, const char *path, pd_tensor *out, long *data_off) {
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return pd__err(PD_ERR_PARSE, "%s: not a .npy file (bad magic)", path);
    unsigned major = pre[6];
    size_t hlen;
    long start;
    if (major == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) return pd__err(PD_ERR_PARSE, "%s: truncated .npy header", path);
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)b[0] << 16 | (size_t)b[1] << 24;
        start = 12;
    } else {
        return pd__err(PD_ERR_PARSE, "%s: unsupported .npy format version %u", path, major);
    }
    if (hlen > (1u << 20)) return pd__err(PD_ERR_PARSE, "%s: .npy header too large", path);
    char *h = PD_MALLOC(hlen + 1);
    if (!h) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    if (fread(h, 1, hlen, f) != hlen) {
        PD_FREE(h);
        return pd__err(PD_ERR_PARSE, "%s: truncated .npy header", path);
    }
    h[hlen] = 0;
    pd_status st = PD_OK;
    const char *d = pd__dict_value(h, "descr"), *fo = pd__dict_value(h, "fortran_order"),
               *sh = pd__dict_value(h, "shape");
    memset(out, 0, sizeof *out);
    if (!d || !fo || !sh) {
        st = pd__err(PD_ERR_PARSE, "%s: .npy header lacks descr, fortran_order or shape", path);
        goto done;
    }
    for (size_t i = 0; i < sizeof pd__npy_types / sizeof pd__npy_types[0]; i++) {
        size_t n = strlen(pd__npy_types[i].descr);
        if (strncmp(d, pd__npy_types[i].descr, n) == 0 && (d[n] == '\'' || d[n] == '"')) out->dtype = pd__npy_types[i].dtype;
    }
    /* single-byte types are also written with '<' or '=' by some writers */
    if (!out->dtype && (strncmp(d, "<u1", 3) == 0 || strncmp(d, "=u1", 3) == 0)) out->dtype = PD_UINT8;
    if (!out->dtype && (strncmp(d, "<b1", 3) == 0 || strncmp(d, "=b1", 3) == 0)) out->dtype = PD_BOOL;
    if (!out->dtype && (strncmp(d, "<i1", 3) == 0 || strncmp(d, "=i1", 3) == 0)) out->dtype = PD_INT8;
    if (!out->dtype) {
        char descr[32];
        size_t n = strcspn(d, "'\",");
        snprintf(descr, sizeof descr, "%.*s", (int)(n < 31 ? n : 31), d);
        st = pd__err(PD_ERR_UNSUPPORTED,
                     "%s: unsupported dtype '%s' (supported: float32, float64, int64, int32, int16, int8, "
                     "uint8/16/32/64, bool, float16, little-endian)",
                     path, descr);
        goto done;
    }
    if (strncmp(fo, "True", 4) == 0) {
        st = pd__err(PD_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported; save with np.ascontiguousarray",
                     path);
        goto done;
    }
    if (*sh != '(') {
        st = pd__err(PD_ERR_PARSE, "%s: bad shape in .npy header", path);
        goto done;
    }
    sh++;
    out->ndim = 0;
    while (*sh && *sh != ')') {
        while (*sh == ' ' || *sh == ',') sh++;
        if (*sh == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(sh, &end, 10);
        if (end == sh || v < 0 || errno) {
            st = pd__err(PD_ERR_PARSE, "%s: bad shape in .npy header", path);
            goto done;
        }
        if (out->ndim == PD_MAX_DIMS) {
            st = pd__err(PD_ERR_UNSUPPORTED, "%s: arrays of more than %d dimensions are not supported", path,
                         PD_MAX_DIMS);
            goto done;
        }
        out->shape[out->ndim++] = v;
        sh = end;
    }
    /* every size computed from the header (the array's, a row's) must fit an
     * int64: the non-zero dims times the element size, checked */
    int64_t bytes = (int64_t)pd_dtype_size(out->dtype);
    for (int i = 0; i < out->ndim; i++)
        if (out->shape[i] && !pd__mul_ok(bytes, out->shape[i], &bytes)) {
            char shape[256];
            pd__format_shape(shape, sizeof shape, out->ndim, out->shape);
            st = pd__err(PD_ERR_PARSE, "%s: array size overflows (shape %s of %s)", path, shape,
                         pd_dtype_name(out->dtype));
            goto done;
        }
    *data_off = start + (long)hlen;
done:
    PD_FREE(h);
    return st;
}

pd_status pd_npy_peek(const char *path, pd_tensor *out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd_npy_peek: %s is NULL", !path ? "path" : "out");
    FILE *f = fopen(path, "rb");
    if (!f) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    pd_tensor t;
    long off;
    pd_status st = pd__npy_header(f, path, &t, &off);
    fclose(f);
    if (st == PD_OK) *out = t;
    return st;
}

pd_status pd_npy_load(const char *path, pd_tensor *out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd_npy_load: %s is NULL", !path ? "path" : "out");
    FILE *f = fopen(path, "rb");
    if (!f) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    pd_tensor t;
    long off;
    pd_status st = pd__npy_header(f, path, &t, &off);
    if (st != PD_OK) {
        fclose(f);
        return st;
    }
    int64_t n = pd_tensor_numel(&t), bytes;
    if (!pd__mul_ok(n, (int64_t)pd_dtype_size(t.dtype), &bytes)) {
        fclose(f);
        return pd__err(PD_ERR_PARSE, "%s: array size overflows", path);
    }
    /* the file must hold the data the header promises (compared as end - off:
     * off + bytes overflows for a size near 2^63) */
    long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (end < off || bytes > (int64_t)(end - off)) {
        fclose(f);
        return pd__err(PD_ERR_PARSE, "%s: truncated: header promises %lld bytes of data", path, (long long)bytes);
    }
    fseek(f, off, SEEK_SET);
    t.data = PD_MALLOC(bytes ? (size_t)bytes : 1);
    if (!t.data) {
        fclose(f);
        return pd__err(PD_ERR_NOMEM, "%s: cannot allocate %lld bytes", path, (long long)bytes);
    }
    if (fread(t.data, 1, (size_t)bytes, f) != (size_t)bytes) {
        PD_FREE(t.data);
        fclose(f);
        return pd__err(PD_ERR_IO, "%s: read failed", path);
    }
    fclose(f);
    *out = t;
    return PD_OK;
}

static const char *pd__npy_descr(pd_dtype t) {
    for (size_t i = 0; i < sizeof pd__npy_types / sizeof pd__npy_types[0]; i++)
        if (pd__npy_types[i].dtype == t) return pd__npy_types[i].descr;
    return NULL;
}

pd_status pd_npy_save(const char *path, const pd_tensor *t) {
    if (!path || !t || (!t->data && pd_tensor_numel(t) != 0))
        return pd__err(PD_ERR_INVALID, "pd_npy_save: %s is NULL", !path ? "path" : !t ? "tensor" : "the tensor's data");
    if (t->ndim < 0 || t->ndim > PD_MAX_DIMS || pd_tensor_numel(t) < 0)
        return pd__err(PD_ERR_INVALID, "pd_npy_save: %s: bad shape (ndim %d)", path, t->ndim);
    const char *descr = pd__npy_descr(t->dtype);
    if (!descr) return pd__err(PD_ERR_UNSUPPORTED, "%s: cannot write %s arrays to .npy", path, pd_dtype_name(t->dtype));
    PD_TRY(pd__check_dest(path)); /* the rename below would replace a device or a FIFO */
    char dict[512];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->ndim; i++)
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld%s", (long long)t->shape[i],
                      (t->ndim == 1 || i + 1 < t->ndim) ? ", " : "");
    if (t->ndim == 1) k -= 1; /* "(5,)" */
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    size_t total = 10 + (size_t)k + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)k + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int64_t bytes = pd_tensor_numel(t) * (int64_t)pd_dtype_size(t->dtype);
    /* write to a temporary name, then rename: a failed write never leaves half a file */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return pd__err(PD_ERR_IO, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)k, f) == (size_t)k;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (bytes == 0 || fwrite(t->data, 1, (size_t)bytes, f) == (size_t)bytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return PD_OK;
}

/* The data of a .npy file mapped read-only instead of read: the pages a
 * batch touches are read when the prefetch thread copies its rows, so a file
 * larger than memory trains. Falls back to pd_npy_load (m->base NULL) where a
 * mapping cannot serve: an empty array, a file that is not regular, data not
 * aligned to 8 bytes (readers index it as typed arrays). */
pd_status pd__npy_map(const char *path, pd_tensor *out, pd__map *m) {
    memset(m, 0, sizeof *m);
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd__npy_map: %s is NULL", !path ? "path" : "out");
    FILE *f = fopen(path, "rb");
    if (!f) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    pd_tensor t;
    long off;
    struct stat sb;
    pd_status st = pd__npy_header(f, path, &t, &off);
    int64_t bytes = 0;
    bool mappable = st == PD_OK && fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && off % 8 == 0 &&
                    pd__mul_ok(pd_tensor_numel(&t), (int64_t)pd_dtype_size(t.dtype), &bytes) && bytes > 0 &&
                    bytes <= (int64_t)sb.st_size - off;
    if (st != PD_OK || !mappable) {
        fclose(f);
        return st != PD_OK ? st : pd_npy_load(path, out); /* its checks say what is wrong, if anything */
    }
    size_t len = (size_t)off + (size_t)bytes;
    void *base = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    fclose(f); /* the mapping keeps the file */
    if (base == MAP_FAILED) return pd_npy_load(path, out);
    m->base = base;
    m->len = len;
    t.data = (char *)base + off;
    *out = t;
    return PD_OK;
}

void pd__npy_unmap(pd__map *m) {
    if (m->base) munmap(m->base, m->len);
    memset(m, 0, sizeof *m);
}
