/* fuzz_ckpt.c - libFuzzer harness for the checkpoint reader (pd__ckpt_parse,
 * runtime/checkpoint.c): a manifest and parts made of any bytes give a
 * checkpoint or an error, never a crash, a leak, undefined behaviour or a hang.
 *
 * An input is a checkpoint folder in one string: the manifest's text, then
 * each part after a line "--part--" (PD_FZ_SEP). Each input is read as it is
 * and again with the manifest's checksum, and its files' sizes and CRC-32s,
 * made to match (when it is still JSON): a mutation rarely keeps a CRC, and
 * the checks behind it (numbers, names, counts, steps, the parts' records)
 * are to be fuzzed too. Each under a folder named ckpt-<the manifest's step>
 * and under one of another name (pdonnx export of a copied folder).
 *
 *   tests/fuzz/run.sh BUILD_DIR SECONDS     (the loader, the profiles, then this)
 *   seeds: tests/fuzz/ckpt/, real checkpoints packed so (tests/fuzz/ckpt/README)
 *
 * Built with -DPD_FUZZ_STANDALONE it replays files instead and says how
 * many of each one's reads found a valid checkpoint; with --all-valid it
 * fails unless all did (the meson test fuzz-ckpt-replay, on the seeds: the
 * format the fuzzer starts from is the one the writer writes). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "../../runtime/checkpoint.h"

#define PD_FZ_SEP "\n--part--\n"
enum { PD_FZ_PARTS = 8 };
static int fz_valid; /* reads that found a valid checkpoint (the replayer's count) */

typedef struct fz_ckpt {
    const uint8_t *man, *part[PD_FZ_PARTS];
    size_t man_len, len[PD_FZ_PARTS];
    int n;
} fz_ckpt;

static const uint8_t *fz_find(const uint8_t *s, size_t n, const char *sep) {
    size_t k = strlen(sep);
    for (size_t i = 0; n >= k && i <= n - k; i++)
        if (memcmp(s + i, sep, k) == 0) return s + i;
    return NULL;
}

static void fz_split(const uint8_t *data, size_t size, fz_ckpt *c) {
    const uint8_t *end = data + size, *at = fz_find(data, size, PD_FZ_SEP);
    memset(c, 0, sizeof *c);
    c->man = data;
    c->man_len = at ? (size_t)(at - data) : size;
    while (at && c->n < PD_FZ_PARTS) {
        const uint8_t *p = at + strlen(PD_FZ_SEP);
        at = fz_find(p, (size_t)(end - p), PD_FZ_SEP);
        c->part[c->n] = p;
        c->len[c->n++] = (size_t)((at ? at : end) - p);
    }
}

/* pd__ckpt_get_fn: "<path>/part-<i>.bin" is part i of the input */
static pd_status fz_get(void *ctx, const char *path, unsigned char **data, size_t *len) {
    const fz_ckpt *c = ctx;
    const char *base = strrchr(path, '/');
    int i;
    char tail;
    if (!base || sscanf(base, "/part-%d.bi%c", &i, &tail) != 2 || tail != 'n' || i < 0 || i >= c->n)
        return pd__err(PD_ERR_IO, "%s: no such file", path);
    unsigned char *b = PD_MALLOC(c->len[i] + 1);
    if (!b) return pd__err(PD_ERR_NOMEM, "out of memory");
    if (c->len[i]) memcpy(b, c->part[i], c->len[i]);
    b[c->len[i]] = 0;
    *data = b;
    *len = c->len[i];
    return PD_OK;
}

/* What a resume does with a checkpoint read: its records walked, its info compared. */
static void fz_read(const char *path, const void *text, size_t len, fz_ckpt *c) {
    pd__ckpt k;
    if (pd__ckpt_parse(path, text, len, fz_get, c, &k) != PD_OK) return;
    fz_valid++;
    for (int i = 0; i < k.nparts; i++) {
        size_t off = 0;
        pd__rec r;
        bool end = false;
        while (pd__rec_next(k.parts[i], k.lens[i], &off, &r, &end, "fuzz") == PD_OK && !end)
            (void)pd__rec_is(&r, "updates");
    }
    cJSON *info = cJSON_Parse(k.info_json);
    char was[64], now[64];
    (void)pd__ckpt_info_diff(info, info, NULL, was, now, sizeof was);
    cJSON_Delete(info);
    pd__ckpt_free(&k);
}

/* The manifest with its files' sizes and CRC-32s, then its checksum, made
 * to match (malloc'd text; NULL when it is not a JSON object). */
static char *fz_repair(const fz_ckpt *c) {
    cJSON *m = cJSON_ParseWithLength((const char *)c->man, c->man_len);
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return NULL;
    }
    cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files"), *e;
    int i = 0;
    cJSON_ArrayForEach(e, files) {
        if (i < c->n && cJSON_IsObject(e)) {
            uint32_t crc = (uint32_t)crc32_z(crc32_z(0, NULL, 0), c->part[i], c->len[i]);
            cJSON_DeleteItemFromObjectCaseSensitive(e, "bytes");
            cJSON_DeleteItemFromObjectCaseSensitive(e, "crc32");
            cJSON_AddNumberToObject(e, "bytes", (double)c->len[i]);
            cJSON_AddNumberToObject(e, "crc32", (double)crc);
        }
        i++;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "checksum");
    uint32_t sum;
    char *text = NULL;
    if (pd__ckpt_manifest_crc(m, &sum) && cJSON_AddNumberToObject(m, "checksum", (double)sum))
        text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_ckpt c;
    fz_split(data, size, &c);
    /* the folder named after the manifest's step, as a checkpoint's is */
    char named[64] = "fuzz/ckpt-000000000000";
    cJSON *m = cJSON_ParseWithLength((const char *)c.man, c.man_len);
    int64_t step;
    if (pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(m, "step"), 0, PD_CKPT_MAX_INT, &step))
        snprintf(named, sizeof named, "fuzz/ckpt-%012lld", (long long)step);
    cJSON_Delete(m);
    fz_read(named, c.man, c.man_len, &c);
    fz_read("fuzz/copy/", c.man, c.man_len, &c);
    char *fixed = fz_repair(&c);
    if (fixed) {
        fz_read(named, fixed, strlen(fixed), &c);
        fz_read("fuzz/copy/", fixed, strlen(fixed), &c);
        free(fixed);
    }
    return 0;
}

#ifdef PD_FUZZ_STANDALONE
int main(int argc, char **argv) {
    bool all = argc > 1 && !strcmp(argv[1], "--all-valid");
    int bad = 0;
    for (int i = 1 + all; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        size_t cap = 1 << 16, n = 0;
        uint8_t *buf = malloc(cap);
        size_t r;
        while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
            n += r;
            if (n == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb) free(buf);
                buf = nb;
            }
        }
        fclose(f);
        if (!buf) {
            fprintf(stderr, "%s: out of memory\n", argv[i]);
            return 1;
        }
        int before = fz_valid;
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
        printf("%s: %d of 4 reads valid\n", argv[i], fz_valid - before);
        bad += fz_valid - before != 4;
    }
    printf("replayed %d inputs\n", argc - 1 - all);
    return all && bad ? 1 : 0;
}
#endif
