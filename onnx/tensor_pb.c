/* tensor_pb.c - ONNX TensorProto decoding, shared by the model reader, and the
 * reader of serialized TensorProto files (ONNX test data's input_N.pb).
 *
 * Decoding covers the dense numeric dtypes in raw_data (little-endian), the
 * typed fields and external data files (int4, uint4, float4e2m1, int2 and
 * uint2 packed two or four to a byte there, unpacked to one a byte here); external data must resolve to a
 * regular file inside the model's folder (no absolute paths, no `..`, no
 * symlink that leads out). Also here: whole-file reads and a nesting-depth
 * check that keeps protobuf-c's recursive unpacker on hostile input safe. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/pd_internal.h"
#include "decode.h"
#include "onnx_io.h"

/* ---- dtypes ------------------------------------------------------------- */

size_t pd__onnx_dtype_size(int32_t dt) {
    switch (dt) {
    case PD_FLOAT:
    case PD_INT32:
    case PD_UINT32: return 4;
    case PD_DOUBLE:
    case PD_INT64:
    case PD_UINT64: return 8;
    case PD_FLOAT16:
    case PD_BFLOAT16:
    case PD_INT16:
    case PD_UINT16: return 2;
    case PD_INT8:
    case PD_UINT8:
    case PD_BOOL: return 1;
    default: return pd__dtype_lowbit((pd_dtype)dt) ? 1 : 0; /* one byte each in memory, packed in files */
    }
}

const char *pd__onnx_type_name(int32_t dt) {
    static const char *const names[] = {
        "undefined",      "float",    "uint8",        "int8",           "uint16",
        "int16",          "int32",    "int64",        "string",         "bool",
        "float16",        "double",   "uint32",       "uint64",         "complex64",
        "complex128",     "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
        "float8e5m2fnuz", "uint4",    "int4",         "float4e2m1",     "float8e8m0",
        "uint2",          "int2",     "float6e2m3",   "float6e3m2"};
    if (dt >= 0 && (size_t)dt < sizeof names / sizeof names[0]) return names[dt];
    return "unknown";
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* raw_data and external data are little-endian; swap in place on a big-endian host. */
static void from_little_endian(void *data, int64_t n, size_t esize) {
    if (esize == 1 || host_is_little_endian()) return;
    unsigned char *p = data;
    for (int64_t i = 0; i < n; i++, p += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* ---- files ---------------------------------------------------------------- */


char *pd__dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n;
    if (!slash) {
        path = ".";
        n = 1;
    } else {
        n = slash == path ? 1 : (size_t)(slash - path); /* "/x" -> "/" */
    }
    char *d = PD_MALLOC(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* ---- wire-level nesting check ----------------------------------------------- */

bool pd__pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t c = *(*p)++;
        r |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

int pd__pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int max_depth) {
    if (max_depth <= 0) return PD__PB_TOO_DEEP;
    const uint8_t *p = buf, *end = buf + len;
    while (p < end) {
        uint64_t tag, v;
        if (!pd__pb_varint(&p, end, &tag)) return PD__PB_MALFORMED;
        switch (tag & 7) {
        case 0:
            if (!pd__pb_varint(&p, end, &v)) return PD__PB_MALFORMED;
            break;
        case 1:
            if (end - p < 8) return PD__PB_MALFORMED;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return PD__PB_MALFORMED;
            p += 4;
            break;
        case 2: {
            if (!pd__pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return PD__PB_MALFORMED;
            uint64_t fn = tag >> 3;
            const ProtobufCFieldDescriptor *fd =
                fn <= UINT_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)fn) : NULL;
            if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE) {
                int r = pd__pb_check(fd->descriptor, p, (size_t)v, max_depth - 1);
                if (r != PD__PB_OK) return r;
            }
            p += v;
            break;
        }
        default: /* groups: protobuf-c refuses them too */
            return PD__PB_MALFORMED;
        }
    }
    return PD__PB_OK;
}

/* ---- external data ---------------------------------------------------------- */

/* Strict non-negative decimal. */
static bool parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        if (v > (INT64_MAX - (*s - '0')) / 10) return false;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return true;
}

/* True when a component of the path is "..". Both separators count, so that a
 * location written on Windows cannot slip through. */
static bool has_dotdot(const char *loc) {
    const char *c = loc;
    while (*c) {
        size_t n = strcspn(c, "/\\");
        if (n == 2 && c[0] == '.' && c[1] == '.') return true;
        c += n;
        if (*c) c++;
    }
    return false;
}

/* Opens the external file named by `loc`, refusing anything that leaves base_dir. */
static pd_status ext_open(const char *what, const char *base_dir, const char *loc, int *fd_out,
                          int64_t *size_out, char **real_out) {
    if (!base_dir)
        return pd__err(PD_ERR_INVALID,
                       "%s: external data '%s' cannot be read: the model was loaded from memory "
                       "without a base folder",
                       what, loc);
    bool drive = ((loc[0] >= 'a' && loc[0] <= 'z') || (loc[0] >= 'A' && loc[0] <= 'Z')) && loc[1] == ':';
    if (loc[0] == '/' || loc[0] == '\\' || drive)
        return pd__err(PD_ERR_INVALID,
                       "%s: external data path '%s' is absolute; it must be relative to the model's folder",
                       what, loc);
    if (has_dotdot(loc))
        return pd__err(PD_ERR_INVALID, "%s: external data path '%s' has a '..' component; refused", what,
                       loc);

    size_t nb = strlen(base_dir), nl = strlen(loc);
    char *full = PD_MALLOC(nb + nl + 2);
    if (!full) return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    memcpy(full, base_dir, nb);
    full[nb] = '/';
    memcpy(full + nb + 1, loc, nl + 1);

    pd_status s = PD_OK;
    char *rbase = NULL, *rfull = NULL;
    int fd = -1;
    rbase = realpath(base_dir, NULL);
    if (!rbase) {
        s = pd__err(PD_ERR_IO, "%s: model folder '%s': %s", what, base_dir, strerror(errno));
        goto done;
    }
    rfull = realpath(full, NULL);
    if (!rfull) {
        s = pd__err(PD_ERR_IO, "%s: external data '%s': %s", what, full, strerror(errno));
        goto done;
    }
    size_t rb = strlen(rbase);
    bool inside =
        strcmp(rbase, "/") == 0 ? rfull[1] != '\0' : strncmp(rfull, rbase, rb) == 0 && rfull[rb] == '/';
    if (!inside) {
        s = pd__err(PD_ERR_INVALID,
                    "%s: external data path '%s' resolves to '%s', outside the model's folder; refused", what,
                    loc, rfull);
        goto done;
    }
    fd = open(rfull, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* a FIFO must not block the open */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        s = pd__err(PD_ERR_IO, "%s: external data '%s': %s", what, full, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        s = pd__err(PD_ERR_INVALID, "%s: external data '%s' is not a regular file", what, full);
        goto done;
    }
    *fd_out = fd;
    *size_out = (int64_t)st.st_size;
    fd = -1;
    if (real_out) *real_out = rfull, rfull = NULL; /* realpath's malloc: the caller frees */
done:
    if (fd >= 0) close(fd);
    free(rbase); /* realpath allocates with malloc */
    free(rfull);
    PD_FREE(full);
    return s;
}

/* Reads the nbytes of external data into a new buffer *out, allocated only
 * once the file is known to hold them. With `where` (lazy_weights) nothing
 * is read: where->ext_path (the resolved file) and ext_off say where they are. */
static pd_status read_external(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                               size_t nbytes, void **out, pd__tensor *where) {
    const char *loc = NULL, *off_s = NULL, *len_s = NULL;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        if (!kv || !kv->key) continue;
        if (strcmp(kv->key, "location") == 0)
            loc = kv->value;
        else if (strcmp(kv->key, "offset") == 0)
            off_s = kv->value;
        else if (strcmp(kv->key, "length") == 0)
            len_s = kv->value;
    }
    if (!loc || !*loc) return pd__err(PD_ERR_PARSE, "%s: external data has no location", what);
    int64_t off = 0, len = -1;
    if (off_s && !parse_i64(off_s, &off))
        return pd__err(PD_ERR_PARSE, "%s: external data '%s': bad offset '%s'", what, loc, off_s);
    if (len_s && !parse_i64(len_s, &len))
        return pd__err(PD_ERR_PARSE, "%s: external data '%s': bad length '%s'", what, loc, len_s);

    int fd = -1;
    int64_t fsize = 0;
    char *real = NULL;
    PD_TRY(ext_open(what, base_dir, loc, &fd, &fsize, where ? &real : NULL));
    pd_status s = PD_OK;
    if (off > fsize) {
        s = pd__err(PD_ERR_PARSE, "%s: external data '%s': offset %lld is past the end (%lld bytes)", what,
                    loc, (long long)off, (long long)fsize);
    } else {
        if (len < 0) len = fsize - off;
        if ((uint64_t)len != (uint64_t)nbytes)
            s = pd__err(PD_ERR_PARSE, "%s: external data '%s' has %lld bytes, the shape needs %zu", what, loc,
                        (long long)len, nbytes);
        else if (len > fsize - off)
            s = pd__err(PD_ERR_PARSE,
                        "%s: external data '%s': %lld bytes at offset %lld run past the end (%lld bytes)",
                        what, loc, (long long)len, (long long)off, (long long)fsize);
        else if (where) {
            size_t n = strlen(real) + 1;
            if (!(where->ext_path = PD_MALLOC(n)))
                s = pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
            else
                memcpy(where->ext_path, real, n), where->ext_off = off;
        } else {
            void *dst = PD_MALLOC(nbytes ? nbytes : 1);
            if (!dst)
                s = pd__err(PD_ERR_NOMEM, "%s: out of memory (%zu bytes)", what, nbytes);
            else
                s = pd__pread_all(fd, loc, dst, nbytes, off);
            if (s == PD_ERR_IO) pd__err_prefix("%s", what);
            if (s == PD_OK)
                *out = dst;
            else
                PD_FREE(dst);
        }
    }
    close(fd);
    free(real);
    return s;
}

pd_status pd__tensor_read(const pd__tensor *t, float *dst) {
    if (!pd__deferred(t)) return PD_OK;
    int fd = open(t->ext_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        pd_status s = pd__err(PD_ERR_IO, "initializer '%s': external data '%s': %s", t->name, t->ext_path, strerror(errno));
        if (fd >= 0) close(fd);
        return s;
    }
    size_t nbytes = sizeof(float) * (size_t)t->numel;
    pd_status s = PD_OK;
    if (!S_ISREG(st.st_mode) || t->ext_off > (int64_t)st.st_size || (int64_t)nbytes > (int64_t)st.st_size - t->ext_off)
        s = pd__err(PD_ERR_IO, "initializer '%s': external data '%s' changed since the model was loaded (%lld bytes)",
                    t->name, t->ext_path, (long long)st.st_size);
    else
        s = pd__pread_all(fd, t->ext_path, dst, nbytes, t->ext_off);
    close(fd);
    if (s == PD_OK) from_little_endian(dst, t->numel, sizeof(float));
    return s;
}

pd_status pd__tensor_load(pd__tensor *t) {
    if (!pd__deferred(t)) return PD_OK;
    float *d = PD_MALLOC(sizeof(float) * (size_t)(t->numel > 0 ? t->numel : 1));
    if (!d) return pd__err(PD_ERR_NOMEM, "initializer '%s': out of memory", t->name);
    pd_status s = pd__tensor_read(t, d);
    if (s != PD_OK) {
        PD_FREE(d);
        return s;
    }
    t->data = d;
    return PD_OK;
}

/* ---- TensorProto -> pd_tensor ---------------------------------------------------- */

/* The typed field that carries a dtype's values, and how many it holds. */
static size_t typed_count(const Onnx__TensorProto *tp, pd_dtype dt, const char **field) {
    switch (dt) {
    case PD_FLOAT: *field = "float_data"; return tp->n_float_data;
    case PD_DOUBLE: *field = "double_data"; return tp->n_double_data;
    case PD_INT64: *field = "int64_data"; return tp->n_int64_data;
    case PD_UINT32:
    case PD_UINT64: *field = "uint64_data"; return tp->n_uint64_data;
    default: *field = "int32_data"; return tp->n_int32_data;
    }
}

/* Fills dst (n elements) from the typed field that goes with the dtype; the
 * count has been checked. int32_data carries int32 and everything narrower,
 * float16 and bfloat16 as their bits. */
static void decode_typed(const Onnx__TensorProto *tp, pd_dtype dt, size_t n, void *dst) {
    const int32_t *v = tp->int32_data;
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case PD_FLOAT: ((float *)dst)[i] = tp->float_data[i]; break;
        case PD_DOUBLE: ((double *)dst)[i] = tp->double_data[i]; break;
        case PD_INT64: ((int64_t *)dst)[i] = tp->int64_data[i]; break;
        case PD_UINT64: ((uint64_t *)dst)[i] = tp->uint64_data[i]; break;
        case PD_UINT32: ((uint32_t *)dst)[i] = (uint32_t)tp->uint64_data[i]; break;
        case PD_INT32: ((int32_t *)dst)[i] = v[i]; break;
        case PD_INT16: ((int16_t *)dst)[i] = (int16_t)v[i]; break;
        case PD_UINT16:
        case PD_FLOAT16:
        case PD_BFLOAT16: ((uint16_t *)dst)[i] = (uint16_t)v[i]; break;
        case PD_INT8: ((int8_t *)dst)[i] = (int8_t)v[i]; break;
        case PD_UINT8: ((uint8_t *)dst)[i] = (uint8_t)v[i]; break;
        case PD_BOOL: ((uint8_t *)dst)[i] = v[i] != 0; break;
        default: ((uint8_t *)dst)[i] = (uint8_t)v[i]; break; /* float8 codes; the packed types' bytes */
        }
    }
}

pd_status pd__decode_tensor(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                            pd_tensor *out) {
    return pd__decode_tensor_ex(tp, what, base_dir, NULL, out);
}

/* What a TensorProto's header says about its data. */
typedef struct pd__tp_layout {
    int32_t dt;
    int ndim;
    int64_t shape[PD_MAX_DIMS], numel;
    size_t esize, nbytes, fbytes; /* fbytes: in the file; packed types take (numel * bits + 7) / 8 */
    bool packed, external;
} pd__tp_layout;

static pd_status pd__tp_layout_read(const Onnx__TensorProto *tp, const char *what, pd__tp_layout *L) {
    memset(L, 0, sizeof *L);
    L->dt = tp->has_data_type ? tp->data_type : 0;
    if (L->dt == PD_STRING) return pd__err(PD_ERR_UNSUPPORTED, "%s: string tensors are not supported", what);
    if (L->dt == PD_UNDEFINED) return pd__err(PD_ERR_PARSE, "%s: has no data type", what);
    L->esize = pd__onnx_dtype_size(L->dt);
    if (L->esize == 0)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: data type %s (%d) is not supported", what, pd__onnx_type_name(L->dt),
                       (int)L->dt);
    if (tp->n_dims > PD_MAX_DIMS)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: rank %zu is above the maximum of %d", what, tp->n_dims, PD_MAX_DIMS);
    if (tp->segment) return pd__err(PD_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    L->ndim = (int)tp->n_dims;
    for (int i = 0; i < L->ndim; i++) {
        if (tp->dims[i] < 0)
            return pd__err(PD_ERR_PARSE, "%s: negative dim %lld at axis %d", what, (long long)tp->dims[i], i);
        L->shape[i] = tp->dims[i];
    }
    L->numel = pd__shape_numel(L->ndim, L->shape);
    int64_t nbytes64;
    if (L->numel < 0 || !pd__mul_ok(L->numel, (int64_t)L->esize, &nbytes64) || (uint64_t)nbytes64 > SIZE_MAX / 2) {
        char sh[128];
        pd__format_shape(sh, sizeof sh, L->ndim, L->shape);
        return pd__err(PD_ERR_NOMEM, "%s: shape %s is too large (its size overflows)", what, sh);
    }
    L->nbytes = (size_t)nbytes64;
    /* numel is at most SIZE_MAX / 2 here, so the packed product cannot overflow */
    int bits = pd__dtype_bits((pd_dtype)L->dt);
    L->packed = bits == 4 || bits == 2;
    L->fbytes = L->packed ? ((size_t)L->numel * (size_t)bits + 7) / 8 : L->nbytes;
    L->external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    return PD_OK;
}

/* The values in the proto match the shape (checked before allocating, so
 * the size stays bounded by the input). */
static pd_status pd__tp_counts_check(const Onnx__TensorProto *tp, const char *what, const pd__tp_layout *L) {
    if (L->external) return PD_OK;
    const char *field = "raw_data";
    size_t have = tp->has_raw_data ? tp->raw_data.len : typed_count(tp, (pd_dtype)L->dt, &field);
    size_t need = tp->has_raw_data || L->packed ? L->fbytes : (size_t)L->numel;
    if (have == need) return PD_OK;
    char sh[128]; /* formatted for the message only: this runs for every initializer */
    pd__format_shape(sh, sizeof sh, L->ndim, L->shape);
    if (tp->has_raw_data)
        return pd__err(PD_ERR_PARSE, "%s: raw_data has %zu bytes but shape %s of %s needs %zu", what, have, sh,
                       pd__onnx_type_name(L->dt), need);
    if (L->packed)
        return pd__err(PD_ERR_PARSE, "%s: %s has %zu values but shape %s of %s packs into %zu", what, field, have, sh,
                       pd__onnx_type_name(L->dt), need);
    return pd__err(PD_ERR_PARSE, "%s: %s has %zu values but shape %s has %lld elements", what, field, have, sh,
                   (long long)L->numel);
}

/* A packed (2- or 4-bit) tensor: its bytes first (from the file, raw_data or
 * int32_data), then unpacked to one element per byte. */
static pd_status pd__tp_read_packed(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                                    const pd__tp_layout *L, void **data) {
    uint8_t *pk = NULL;
    if (L->external) {
        PD_TRY(read_external(tp, what, base_dir, L->fbytes, (void **)&pk, NULL));
    } else {
        pk = PD_MALLOC(L->fbytes ? L->fbytes : 1);
        if (!pk) return pd__err(PD_ERR_NOMEM, "%s: out of memory (%zu bytes)", what, L->fbytes);
        if (tp->has_raw_data) {
            if (L->fbytes) memcpy(pk, tp->raw_data.data, L->fbytes);
        } else {
            decode_typed(tp, (pd_dtype)L->dt, L->fbytes, pk);
        }
    }
    *data = PD_MALLOC(L->nbytes ? L->nbytes : 1);
    if (!*data) {
        PD_FREE(pk);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory (%zu bytes)", what, L->nbytes);
    }
    pd__unpack_bits((pd_dtype)L->dt, pk, L->numel, *data);
    PD_FREE(pk);
    return PD_OK;
}

/* Any other tensor: from the file (or only checked there, for lazy_weights),
 * raw_data or the typed field. */
static pd_status pd__tp_read_plain(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                                   const pd__tp_layout *L, pd__tensor *where, void **data) {
    if (L->external && where && L->dt == PD_FLOAT) return read_external(tp, what, base_dir, L->nbytes, NULL, where);
    if (L->external) {
        PD_TRY(read_external(tp, what, base_dir, L->nbytes, data, NULL));
        from_little_endian(*data, L->numel, L->esize);
        return PD_OK;
    }
    *data = PD_MALLOC(L->nbytes ? L->nbytes : 1);
    if (!*data) return pd__err(PD_ERR_NOMEM, "%s: out of memory (%zu bytes)", what, L->nbytes);
    if (tp->has_raw_data) {
        if (L->nbytes) memcpy(*data, tp->raw_data.data, L->nbytes);
        from_little_endian(*data, L->numel, L->esize);
    } else {
        decode_typed(tp, (pd_dtype)L->dt, (size_t)L->numel, *data);
    }
    return PD_OK;
}

pd_status pd__decode_tensor_ex(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                               pd__tensor *where, pd_tensor *out) {
    pd__tp_layout L;
    PD_TRY(pd__tp_layout_read(tp, what, &L));
    PD_TRY(pd__tp_counts_check(tp, what, &L));
    void *data = NULL;
    if (L.packed)
        PD_TRY(pd__tp_read_packed(tp, what, base_dir, &L, &data));
    else
        PD_TRY(pd__tp_read_plain(tp, what, base_dir, &L, where, &data));
    if (L.dt == PD_BOOL && data)
        for (size_t i = 0; i < L.nbytes; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
    memset(out, 0, sizeof *out);
    out->dtype = (pd_dtype)L.dt;
    out->ndim = L.ndim;
    memcpy(out->shape, L.shape, sizeof L.shape);
    out->data = data;
    return PD_OK;
}

/* ---- serialized TensorProto files ------------------------------------------------ */

/* Sequence and Optional protos carry their name in field 1 (length-delimited)
 * and their elements in fields 3 and up; in a TensorProto field 1 is `dims`,
 * which proto2 writers emit as varints, and field 3 a `segment`, which nobody
 * writes. Either sign marks a container that only looks like a tensor. */
static bool looks_like_container(const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    while (p < end) {
        uint64_t tag, v;
        if (!pd__pb_varint(&p, end, &tag)) return false;
        if (tag == ((1u << 3) | 2u) || tag >> 3 == 3) return true;
        switch (tag & 7) {
        case 0:
            if (!pd__pb_varint(&p, end, &v)) return false;
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        case 2:
            if (!pd__pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            p += v;
            break;
        default: return false;
        }
    }
    return false;
}

pd_status pd__tensor_pb_load(const char *path, pd_tensor *out, char **name_out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd__tensor_pb_load: NULL argument");
    unsigned char *buf;
    size_t len;
    PD_TRY(pd__read_file(path, &buf, &len));
    if (looks_like_container(buf, len)) {
        PD_FREE(buf);
        return pd__err(PD_ERR_UNSUPPORTED,
                       "%s: a SequenceProto or OptionalProto, not a TensorProto; not supported", path);
    }
    Onnx__TensorProto *tp =
        pd__pb_check(&onnx__tensor_proto__descriptor, buf, len, PD__PB_MAX_DEPTH) == PD__PB_OK
            ? onnx__tensor_proto__unpack(NULL, len, buf)
            : NULL;
    PD_FREE(buf);
    if (!tp) return pd__err(PD_ERR_PARSE, "%s: not a valid TensorProto (protobuf parse failed)", path);

    pd_status s = PD_OK;
    char *dir = pd__dir_of(path);
    const char *tname = tp->name ? tp->name : "";
    size_t wn = strlen(path) + strlen(tname) + 16;
    char *what = PD_MALLOC(wn);
    char *name = pd__strdup(tname);
    if (!dir || !what || !name) {
        s = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (*tname)
        snprintf(what, wn, "%s: tensor '%s'", path, tname);
    else
        snprintf(what, wn, "%s", path);
    pd_tensor t;
    s = pd__decode_tensor(tp, what, dir, &t);
    if (s != PD_OK) goto done;
    *out = t;
    if (name_out) {
        *name_out = name;
        name = NULL;
    }
done:
    PD_FREE(name);
    PD_FREE(what);
    PD_FREE(dir);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return s;
}
