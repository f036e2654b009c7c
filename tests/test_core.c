/* test_core.c - npy files, dtype conversions, error messages. */
#include "../core/pd_internal.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tmp(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static void test_npy_roundtrip(void) {
    float v[6] = {1, -2.5f, 3, 4, 5e-8f, 6};
    pd_tensor t = {PD_FLOAT, 2, {2, 3}, v}, r;
    CHECK(pd_npy_save(tmp("a.npy"), &t) == PD_OK, "npy: save float32 [2,3]");
    CHECK(pd_npy_load(tmp("a.npy"), &r) == PD_OK, "npy: load it back");
    CHECK(r.dtype == PD_FLOAT && r.ndim == 2 && r.shape[0] == 2 && r.shape[1] == 3 &&
              memcmp(r.data, v, sizeof v) == 0,
          "npy: same dtype, shape and bytes");
    pd_tensor_free(&r);

    int64_t iv[5] = {0, -1, 1LL << 40, 7, 9};
    pd_tensor ti = {PD_INT64, 1, {5}, iv};
    CHECK(pd_npy_save(tmp("b.npy"), &ti) == PD_OK && pd_npy_load(tmp("b.npy"), &r) == PD_OK &&
              r.dtype == PD_INT64 && r.ndim == 1 && r.shape[0] == 5 && memcmp(r.data, iv, sizeof iv) == 0,
          "npy: int64 [5] round trip");
    pd_tensor_free(&r);

    double s = 3.25;
    pd_tensor ts = {PD_DOUBLE, 0, {0}, &s};
    CHECK(pd_npy_save(tmp("c.npy"), &ts) == PD_OK && pd_npy_load(tmp("c.npy"), &r) == PD_OK && r.ndim == 0 &&
              *(double *)r.data == 3.25,
          "npy: float64 scalar round trip");
    pd_tensor_free(&r);
}

static void test_npy_numpy_file(void) {
    /* written by numpy: np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)) */
    const char hdr[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    unsigned char buf[128 + 24];
    size_t hl = 118; /* 10 + 118 = 128 */
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hl;
    buf[9] = 0;
    memcpy(buf + 10, hdr, sizeof hdr - 1);
    buf[127] = '\n';
    float v[6] = {0, 1, 2, 3, 4, 5};
    memcpy(buf + 128, v, 24);
    write_raw(tmp("np.npy"), buf, sizeof buf);
    pd_tensor r;
    CHECK(pd_npy_load(tmp("np.npy"), &r) == PD_OK && r.ndim == 2 && r.shape[1] == 3 && ((float *)r.data)[5] == 5,
          "npy: reads numpy's own layout");
    pd_tensor_free(&r);

    write_raw(tmp("trunc.npy"), buf, sizeof buf - 4);
    pd_status st = pd_npy_load(tmp("trunc.npy"), &r);
    CHECK(st == PD_ERR_PARSE && strstr(pd_last_error(), "trunc.npy") && strstr(pd_last_error(), "truncated"),
          "npy: truncated data is a parse error naming the file (%s)", pd_last_error());

    char *p = memmem(buf, 128, "False", 5);
    memcpy(p, "True ", 5);
    write_raw(tmp("fortran.npy"), buf, sizeof buf);
    st = pd_npy_load(tmp("fortran.npy"), &r);
    CHECK(st == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "Fortran"), "npy: Fortran order refused (%s)",
          pd_last_error());

    memcpy(p, "False", 5);
    p = memmem(buf, 128, "<f4", 3);
    memcpy(p, "<c8", 3);
    write_raw(tmp("complex.npy"), buf, sizeof buf);
    st = pd_npy_load(tmp("complex.npy"), &r);
    CHECK(st == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "<c8"), "npy: complex dtype refused (%s)",
          pd_last_error());

    st = pd_npy_load(tmp("missing.npy"), &r);
    CHECK(st == PD_ERR_IO && strstr(pd_last_error(), "missing.npy"), "npy: missing file is an I/O error (%s)",
          pd_last_error());
    write_raw(tmp("junk.npy"), "hello world", 11);
    st = pd_npy_load(tmp("junk.npy"), &r);
    CHECK(st == PD_ERR_PARSE, "npy: junk is a parse error (%s)", pd_last_error());
    double one = 1;
    pd_tensor t1 = {PD_DOUBLE, 0, {0}, &one};
    st = pd_npy_save("/nonexistent-dir/x.npy", &t1);
    CHECK(st == PD_ERR_IO && strstr(pd_last_error(), "/nonexistent-dir/x.npy"), "npy: unwritable path fails cleanly (%s)",
          pd_last_error());
    st = pd_npy_save(tmp("freed.npy"), &r); /* r was freed: its data is NULL */
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "data"), "npy: a tensor without data is refused (%s)",
          pd_last_error());
}

static void test_half(void) {
    struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {0.0f, 0x0000}, {5.9604645e-8f, 0x0001},
        {6.1035156e-5f, 0x0400}, {0.33325195f, 0x3555}, {INFINITY, 0x7c00}, {1e6f, 0x7c00},
        {1.00048828125f, 0x3c00 /* tie to even */}, {1.00146484375f, 0x3c02 /* tie to even, up */},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (pd__float_to_half(cases[i].f) != cases[i].h) {
            bad++;
            printf("  half(%g) = 0x%04x, want 0x%04x\n", cases[i].f, pd__float_to_half(cases[i].f), cases[i].h);
        }
    }
    CHECK(bad == 0, "float16: float -> half rounds to nearest even, handles subnormals and overflow");
    bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* nan */
        if (pd__float_to_half(pd__half_to_float((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "float16: every non-NaN half survives half -> float -> half (%d differ)", bad);
    CHECK(pd__float_to_bf16(1.0f) == 0x3f80 && pd__bf16_to_float(0xc040) == -3.0f &&
              pd__float_to_bf16(1.00390625f) == 0x3f80 && pd__float_to_bf16(1.01171875f) == 0x3f82,
          "bfloat16: conversions round to nearest even");
}

static void test_overflow(void) {
    int64_t s[3] = {1LL << 40, 1LL << 30, 1};
    CHECK(pd__shape_numel(3, s) == -1, "shape: numel overflow detected");
    int64_t s2[2] = {3, -1};
    CHECK(pd__shape_numel(2, s2) == -1, "shape: negative dim rejected");
    int64_t s3[2] = {3, 0};
    CHECK(pd__shape_numel(2, s3) == 0, "shape: zero-size tensor has numel 0");
}

/* The op table (core/ops.h) is consistent with itself and the CPU backend:
 * one family each, a name found again by lookup, every function present, a
 * backward that writes whole only where there is a backward. The other
 * walks: tests/test_grad_*.c (finite differences), test_cuda.c (cu_table). */
static void test_op_table(void) {
    char bad[2048] = "";
    for (int op = 0; op < PD_OP_COUNT; op++) {
        const pd__op_def *d = &pd__ops[op];
        int fam = d->flags & PD_OPF_FAMILY;
        const char *why = NULL;
        if (fam != PD_OPF_NN && fam != PD_OPF_ELEM && fam != PD_OPF_TENSOR && fam != PD_OPF_RNN) why = "not exactly one family";
        else if (pd__op_lookup(d->name) != op) why = "its name does not look it up";
        else if (!d->shape || !d->flops || !pd__cpu_kernels[op] || !pd__cpu_grads[op]) why = "a function missing";
        else if ((d->flags & PD_OPF_BWD_WRITES) && !d->grad) why = "PD_OPF_BWD_WRITES without a gradient";
        else if (d->state & d->grad) why = "an input both differentiable and a buffer it updates";
        if (why) snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %s (%s);", d->name, why);
    }
    CHECK(!bad[0], "op table: %d ops, each consistent:%s", (int)PD_OP_COUNT, bad[0] ? bad : " yes");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pd-test-core-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_npy_roundtrip();
    test_npy_numpy_file();
    test_half();
    test_overflow();
    test_op_table();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    return check_summary();
}
