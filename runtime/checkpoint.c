/* checkpoint.c - checkpoints on disk and their background writer
 * (checkpoint.h). DIR/ckpt-<step>/ holds one part-<i>.bin per stage and a
 * manifest.json with each part's size and CRC-32 and a checksum of its own;
 * written in a temporary folder, fsynced, manifest last, then renamed, so a
 * crash leaves the old set or the new one. Layout, manifest fields and
 * clean-up rules: docs/CHECKPOINT.md, "On disk". */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* ---- records ---------------------------------------------------------------- */

/* header: kind u32, version i32, name_len u32, bytes u64; then name, then data */
#define PD_REC_HDR 20

void pd__rec_put(pd__recw *w, uint32_t kind, int32_t version, const char *name, const void *data, uint64_t bytes) {
    uint32_t nl = (uint32_t)strlen(name);
    size_t need = PD_REC_HDR + nl + (size_t)bytes;
    if (w->buf && w->n + need <= w->cap) {
        char *o = w->buf + w->n;
        memcpy(o, &kind, 4);
        memcpy(o + 4, &version, 4);
        memcpy(o + 8, &nl, 4);
        memcpy(o + 12, &bytes, 8);
        memcpy(o + PD_REC_HDR, name, nl);
        if (bytes) memcpy(o + PD_REC_HDR + nl, data, (size_t)bytes);
    }
    w->n += need;
}

pd_status pd__rec_next(const void *buf, size_t len, size_t *off, pd__rec *r, bool *end, const char *what) {
    const char *b = buf;
    *end = *off == len;
    if (*end) return PD_OK;
    if (len - *off < PD_REC_HDR) return pd__err(PD_ERR_PARSE, "%s: a record is cut short at byte %zu", what, *off);
    memcpy(&r->kind, b + *off, 4);
    memcpy(&r->version, b + *off + 4, 4);
    memcpy(&r->name_len, b + *off + 8, 4);
    memcpy(&r->bytes, b + *off + 12, 8);
    size_t rest = len - *off - PD_REC_HDR;
    if (r->kind < PD_REC_WEIGHT || r->kind > PD_REC_META || r->name_len > rest || r->bytes > rest - r->name_len)
        return pd__err(PD_ERR_PARSE, "%s: a malformed record at byte %zu", what, *off);
    r->name = b + *off + PD_REC_HDR;
    r->data = b + *off + PD_REC_HDR + r->name_len;
    *off += PD_REC_HDR + r->name_len + (size_t)r->bytes;
    return PD_OK;
}

bool pd__rec_is(const pd__rec *r, const char *name) {
    return strlen(name) == r->name_len && memcmp(r->name, name, r->name_len) == 0;
}

/* ---- on disk ---------------------------------------------------------------- */

static uint32_t pd__crc(const void *data, size_t len) {
    return (uint32_t)crc32_z(crc32_z(0, NULL, 0), data, len);
}

static pd_status pd__fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0 ? PD_OK : pd__err(PD_ERR_IO, "%s: fsync: %s", path, strerror(e));
}

/* ---- clean-up ---- */

/* Digits then the end or `tail`: the rest after them, NULL when s does not start so. */
static const char *pd__digits(const char *s, const char *tail) {
    if (!isdigit((unsigned char)*s)) return NULL;
    while (isdigit((unsigned char)*s)) s++;
    size_t n = strlen(tail);
    return strncmp(s, tail, n) == 0 ? s + n : NULL;
}

/* A file a writer puts in a checkpoint's folder: manifest.json, part-<i>.bin
 * or part-<i>.json, or one of them with pd__write_atomic's ".tmp.<pid>". */
static bool pd__own_file(const char *name) {
    const char *p = NULL;
    if (strncmp(name, "manifest.json", 13) == 0) p = name + 13;
    else if (strncmp(name, "part-", 5) == 0 && !(p = pd__digits(name + 5, ".bin"))) p = pd__digits(name + 5, ".json");
    if (!p) return false;
    if (!*p) return true;
    const char *q = strncmp(p, ".tmp.", 5) == 0 ? pd__digits(p + 5, "") : NULL;
    return q && !*q;
}

/* Removes entry `name` of the folder open as dfd (a checkpoint or a
 * temporary folder of one), never through a link: a link is unlinked itself;
 * a folder is opened without following links and only the regular files a
 * writer makes (pd__own_file) are removed from it, then the folder, which
 * stays when something else is in it. Anything else stays too. */
static void pd__ckpt_remove(int dfd, const char *name) {
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (S_ISLNK(sb.st_mode)) {
        unlinkat(dfd, name, 0);
        return;
    }
    if (!S_ISDIR(sb.st_mode)) return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL; /* fd < 0: it became a link or went meanwhile */
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (pd__own_file(e->d_name) && fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(fd, e->d_name, 0);
    closedir(d);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

/* pd__ckpt_remove of dir's entry `name`. */
static void pd__ckpt_remove_in(const char *dir, const char *name) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    pd__ckpt_remove(dfd, name);
    close(dfd);
}

/* A folder the writer made or shares, not a link to one (which would have
 * it write, and later remove, files elsewhere). */
static pd_status pd__real_dir(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return pd__err(PD_ERR_IO, "%s: not a folder (a link?); remove it", path);
    return PD_OK;
}

static int pd__cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The step of a checkpoint folder's name, ckpt-<step> as the writer names
 * it (12 digits or more, no other spelling); -1 for any other name. */
static int64_t pd__name_step(const char *name) {
    const char *p = strncmp(name, "ckpt-", 5) == 0 ? pd__digits(name + 5, "") : NULL;
    if (!p || *p || strlen(name + 5) > 18) return -1;
    char want[32];
    long long v = strtoll(name + 5, NULL, 10);
    snprintf(want, sizeof want, "ckpt-%012lld", v);
    return strcmp(want, name) == 0 ? (int64_t)v : -1;
}

/* Steps of the checkpoints in dir, newest first (malloc'd); also clears
 * temporary folders other writers left (clear true). */
static pd_status pd__ckpt_list(const char *dir, int64_t **steps, int *n, bool clear) {
    DIR *d = opendir(dir);
    if (!d) return pd__err(PD_ERR_IO, "%s: %s", dir, strerror(errno));
    int cap = 16, k = 0;
    int64_t *s = PD_MALLOC(sizeof(int64_t) * (size_t)cap);
    struct dirent *e;
    while (s && (e = readdir(d))) {
        int64_t v = pd__name_step(e->d_name);
        if (v >= 0) {
            if (k == cap) {
                int64_t *t = realloc(s, sizeof(int64_t) * (size_t)(cap *= 2));
                if (!t) break;
                s = t;
            }
            s[k++] = v;
        } else if (clear && strncmp(e->d_name, ".ckpt-", 6) == 0) {
            pd__ckpt_remove(dirfd(d), e->d_name);
        }
    }
    closedir(d);
    if (!s) return pd__err(PD_ERR_NOMEM, "out of memory");
    qsort(s, (size_t)k, sizeof *s, pd__cmp_i64_desc);
    *steps = s;
    *n = k;
    return PD_OK;
}

/* The finished folder tmp (manifest written) becomes DIR/ckpt-<step>: fsynced,
 * renamed (a checkpoint of this step already there, from a resumed run passing
 * it again, is replaced whole), DIR fsynced; then the oldest beyond `keep`
 * go, only once the new one is in place. */
static pd_status pd__ckpt_place(const char *dir, const char *tmp, int64_t step, int keep) {
    char fin[4096], old[4200], oldname[64], f[64];
    snprintf(fin, sizeof fin, "%s/ckpt-%012" PRId64, dir, step);
    snprintf(oldname, sizeof oldname, ".ckpt-%012" PRId64 ".old-%ld", step, (long)getpid());
    snprintf(old, sizeof old, "%s/%s", dir, oldname);
    PD_TRY(pd__fsync_path(tmp));
    pd__ckpt_remove_in(dir, oldname); /* an earlier process of this pid's, killed in between */
    bool had = rename(fin, old) == 0; /* a link is renamed itself, then unlinked */
    if (rename(tmp, fin) != 0) {
        pd_status st = pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", fin, strerror(errno));
        if (had) rename(old, fin);
        return st;
    }
    if (had) pd__ckpt_remove_in(dir, oldname);
    PD_TRY(pd__fsync_path(dir));
    int64_t *s;
    int n;
    if (keep > 0 && pd__ckpt_list(dir, &s, &n, false) == PD_OK) {
        for (int i = keep; i < n; i++) {
            snprintf(f, sizeof f, "ckpt-%012" PRId64, s[i]);
            pd__ckpt_remove_in(dir, f);
        }
        PD_FREE(s);
    }
    return PD_OK;
}

/* The manifest of checkpoint `step` with the run's info, its files added
 * with pd__manifest_add (NULL when out of memory). */
static cJSON *pd__manifest_new(int64_t step, const char *info_json) {
    cJSON *m = cJSON_CreateObject(), *info = info_json ? cJSON_Parse(info_json) : cJSON_CreateObject();
    if (!m || !info || !cJSON_AddArrayToObject(m, "files")) {
        cJSON_Delete(m);
        cJSON_Delete(info);
        return NULL;
    }
    cJSON_AddStringToObject(m, "format", "pdonnx-checkpoint");
    cJSON_AddNumberToObject(m, "version", PD_CKPT_VERSION);
    cJSON_AddNumberToObject(m, "step", (double)step);
    cJSON_AddItemToObject(m, "info", info);
    return m;
}

static void pd__manifest_add(cJSON *m, int i, double bytes, double crc) {
    cJSON *e = cJSON_CreateObject();
    char name[32];
    snprintf(name, sizeof name, "part-%d.bin", i);
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddNumberToObject(e, "bytes", bytes);
    cJSON_AddNumberToObject(e, "crc32", crc);
    cJSON_AddItemToArray(cJSON_GetObjectItem(m, "files"), e);
}

bool pd__ckpt_manifest_crc(const cJSON *m, uint32_t *crc) {
    char *text = cJSON_PrintUnformatted(m);
    if (!text) return false;
    *crc = pd__crc(text, strlen(text));
    free(text);
    return true;
}

/* Writes the manifest, its checksum added, into the checkpoint's folder
 * tmp: the last file written. */
static pd_status pd__manifest_write(cJSON *m, const char *tmp) {
    uint32_t crc;
    if (!pd__ckpt_manifest_crc(m, &crc) || !cJSON_AddNumberToObject(m, "checksum", (double)crc))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    char f[4200], *text = cJSON_Print(m);
    if (!text) return pd__err(PD_ERR_NOMEM, "out of memory");
    snprintf(f, sizeof f, "%s/manifest.json", tmp);
    pd_status st = pd__write_atomic(f, text, strlen(text));
    free(text);
    return st;
}

pd_status pd__ckpt_write(const char *dir, int64_t step, const char *info_json, int nparts, const void *const *parts,
                         const size_t *lens, int keep) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return pd__err(PD_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    char tmp[4096], name[64], f[4200];
    snprintf(name, sizeof name, ".ckpt-%012" PRId64 ".tmp-%ld", step, (long)getpid());
    if (snprintf(tmp, sizeof tmp, "%s/%s", dir, name) >= (int)sizeof tmp - 64)
        return pd__err(PD_ERR_IO, "%s: path too long", dir);
    pd__ckpt_remove_in(dir, name);
    if (mkdir(tmp, 0755) != 0) return pd__err(PD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    cJSON *m = pd__manifest_new(step, info_json);
    pd_status st = m ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    for (int i = 0; st == PD_OK && i < nparts; i++) {
        snprintf(f, sizeof f, "%s/part-%d.bin", tmp, i);
        st = pd__write_atomic(f, parts[i], lens[i]);
        pd__manifest_add(m, i, (double)lens[i], (double)pd__crc(parts[i], lens[i]));
    }
    if (st == PD_OK) st = pd__manifest_write(m, tmp);
    cJSON_Delete(m);
    if (st == PD_OK) st = pd__ckpt_place(dir, tmp, step, keep);
    if (st != PD_OK) pd__ckpt_remove_in(dir, name);
    return st;
}

/* ---- one checkpoint written by several processes ---- */

static void pd__shared_tmp(char *buf, size_t n, const char *dir, int64_t step) {
    snprintf(buf, n, "%s/.ckpt-%012" PRId64 ".tmp-shared", dir, step);
}

pd_status pd__ckpt_write_part(const char *dir, int64_t step, int index, const void *data, size_t len) {
    char tmp[4096], f[4200], side[256];
    pd__shared_tmp(tmp, sizeof tmp, dir, step);
    /* test hook (tests/test_mpi.sh): PDONNX_TEST_FAIL_CKPT=STEP:PART, that part's write fails */
    const char *fv = getenv("PDONNX_TEST_FAIL_CKPT");
    long long fs;
    int fp;
    if (fv && sscanf(fv, "%lld:%d", &fs, &fp) == 2 && fs == (long long)step && fp == index)
        return pd__err(PD_ERR_IO, "%s: part %d: injected failure", tmp, index);
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return pd__err(PD_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    PD_TRY(pd__real_dir(tmp));
    snprintf(f, sizeof f, "%s/part-%d.bin", tmp, index);
    PD_TRY(pd__write_atomic(f, data, len));
    /* its size and checksum, for the process that writes the manifest; last, so it means the part is whole */
    int n = snprintf(side, sizeof side, "{\"bytes\": %zu, \"crc32\": %u}\n", len, pd__crc(data, len));
    snprintf(f, sizeof f, "%s/part-%d.json", tmp, index);
    return pd__write_atomic(f, side, (size_t)n);
}

/* cancel (may be NULL): non-zero (read atomically) ends the wait for the
 * parts; so does stop(ctx) returning true (stop may be NULL) */
static pd_status pd__finalize(const char *dir, int64_t step, const char *info_json, int nparts, int keep,
                              double timeout_s, const int *cancel, bool (*stop)(void *), void *ctx) {
    char tmp[4096], f[4200];
    pd__shared_tmp(tmp, sizeof tmp, dir, step);
    if (strlen(tmp) >= sizeof tmp - 64) return pd__err(PD_ERR_IO, "%s: path too long", dir);
    cJSON *m = pd__manifest_new(step, info_json);
    if (!m) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_status st = PD_OK;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; st == PD_OK && i < nparts; i++) {
        snprintf(f, sizeof f, "%s/part-%d.json", tmp, i);
        unsigned char *side = NULL;
        size_t len;
        for (;;) { /* the other processes write theirs at their own pace */
            FILE *probe = fopen(f, "r");
            if (probe) {
                fclose(probe);
                break;
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) || (stop && stop(ctx))) {
                st = pd__err(PD_ERR_IO, "%s: part %d never came (the run failed)", tmp, i);
                break;
            }
            if ((double)(t1.tv_sec - t0.tv_sec) > timeout_s) {
                st = pd__err(PD_ERR_IO, "%s: part %d never came (waited %g s)", tmp, i, timeout_s);
                break;
            }
            struct timespec nap = {0, 5000000};
            nanosleep(&nap, NULL);
        }
        if (st != PD_OK || (st = pd__real_dir(tmp)) != PD_OK || (st = pd__read_file(f, &side, &len)) != PD_OK) break;
        cJSON *j = cJSON_ParseWithLength((const char *)side, len);
        PD_FREE(side);
        int64_t bytes, crc;
        if (!pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(j, "bytes"), 0, PD_CKPT_MAX_INT, &bytes) ||
            !pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(j, "crc32"), 0, UINT32_MAX, &crc)) {
            cJSON_Delete(j);
            st = pd__err(PD_ERR_PARSE, "%s: malformed", f);
            break;
        }
        pd__manifest_add(m, i, (double)bytes, (double)crc);
        cJSON_Delete(j);
        unlink(f);
    }
    if (st == PD_OK) st = pd__manifest_write(m, tmp);
    cJSON_Delete(m);
    if (st == PD_OK) st = pd__ckpt_place(dir, tmp, step, keep);
    return st;
}

pd_status pd__ckpt_finalize(const char *dir, int64_t step, const char *info_json, int nparts, int keep,
                            double timeout_s) {
    return pd__finalize(dir, step, info_json, nparts, keep, timeout_s, NULL, NULL, NULL);
}

void pd__ckpt_free(pd__ckpt *c) {
    if (!c) return;
    for (int i = 0; c->parts && i < c->nparts; i++) PD_FREE(c->parts[i]);
    PD_FREE(c->parts);
    PD_FREE(c->lens);
    PD_FREE(c->crcs);
    PD_FREE(c->path);
    PD_FREE(c->info_json);
    memset(c, 0, sizeof *c);
}

bool pd__ckpt_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi)) return false; /* NaN too; lo, hi within 2^53: exact */
    int64_t i = (int64_t)d;
    if ((double)i != d) return false;
    *out = i;
    return true;
}

/* The step a part's records hold ("updates", the optimizer's step count:
 * the boundary it was taken at), -1 when it holds none; PD_ERR_PARSE naming
 * the file when a record is malformed. */
static pd_status pd__part_step(const void *data, size_t len, const char *what, int64_t *step) {
    size_t off = 0;
    *step = -1;
    for (;;) {
        pd__rec r;
        bool end;
        PD_TRY(pd__rec_next(data, len, &off, &r, &end, what));
        if (end) return PD_OK;
        if (r.kind == PD_REC_META && r.bytes == 8 && pd__rec_is(&r, "updates")) memcpy(step, r.data, 8);
    }
}

/* The checks of a manifest m (its text parsed) of checkpoint folder path, f
 * its file's name for messages; *step, *files and *info on success. */
static pd_status pd__manifest_check(cJSON *m, const char *path, const char *f, int64_t *step, const cJSON **files,
                                    const cJSON **info) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    int64_t version, crc;
    if (!cJSON_IsObject(m) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pdonnx-checkpoint") != 0 ||
        !pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(m, "version"), 0, INT32_MAX, &version))
        return pd__err(PD_ERR_PARSE, "%s: not a pdonnx checkpoint manifest", f);
    if (version < 1 || version > PD_CKPT_VERSION)
        return pd__err(PD_ERR_PARSE, "%s: version %lld, not one this build reads (1 to %d)", f, (long long)version,
                       PD_CKPT_VERSION);
    if (version >= 2) { /* every field is covered: the checksum is of the text without it */
        cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(m, "checksum");
        bool ok = pd__ckpt_json_int(sum, 0, UINT32_MAX, &crc);
        cJSON_Delete(sum);
        uint32_t got;
        if (!ok) return pd__err(PD_ERR_PARSE, "%s: no checksum (corrupted)", f);
        if (!pd__ckpt_manifest_crc(m, &got)) return pd__err(PD_ERR_NOMEM, "out of memory");
        if (got != (uint32_t)crc)
            return pd__err(PD_ERR_PARSE, "%s: checksum mismatch (CRC-32 %u of its content, it says %lld): corrupted",
                           f, got, (long long)crc);
    }
    *files = cJSON_GetObjectItemCaseSensitive(m, "files");
    *info = cJSON_GetObjectItemCaseSensitive(m, "info");
    if (!pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(m, "step"), 0, PD_CKPT_MAX_INT, step))
        return pd__err(PD_ERR_PARSE, "%s: the step is not an integer in [0, 2^53]", f);
    if (!cJSON_IsObject(*info)) return pd__err(PD_ERR_PARSE, "%s: no info object", f);
    int n = cJSON_IsArray(*files) ? cJSON_GetArraySize(*files) : 0;
    if (n < 1 || n > PD_CKPT_MAX_PARTS)
        return pd__err(PD_ERR_PARSE, "%s: %d files listed, not 1 to %d", f, n, PD_CKPT_MAX_PARTS);
    /* the folder's name, when it is a checkpoint's, says the step too */
    size_t k = strlen(path);
    while (k > 1 && path[k - 1] == '/') k--;
    size_t b = k;
    while (b > 0 && path[b - 1] != '/') b--;
    char base[64] = "";
    if (k - b < sizeof base) memcpy(base, path + b, k - b), base[k - b] = 0;
    int64_t named = pd__name_step(base);
    if (named >= 0 && named != *step)
        return pd__err(PD_ERR_PARSE, "%s: step %lld, but the folder is step %lld's: corrupted", f, (long long)*step,
                       (long long)named);
    if (named < 0 && version < 2) /* nothing else vouches for its step */
        return pd__err(PD_ERR_PARSE, "%s: a version-1 manifest (no checksum) is read only in a folder named "
                       "ckpt-<its step, 12 digits>", f);
    return PD_OK;
}

/* ---- a part streamed ---- */

enum { PD_STREAM_CHUNK = 1 << 20 };

struct pd__ckpt_stream {
    int fd;
    const char *path;
    uint64_t len, off; /* the file's size (the manifest's); the position */
    uint64_t left;     /* bytes of the current record's data not read yet */
    bool sum;          /* every byte is read and counted into crc (else data is passed over) */
    uint32_t crc;
    char *buf;         /* PD_STREAM_CHUNK bytes */
};

/* n bytes at the position into buf (counted into the CRC). */
static pd_status pd__stream_raw(pd__ckpt_stream *s, void *buf, size_t n) {
    if (n > s->len - s->off)
        return pd__err(PD_ERR_PARSE, "%s: a record is cut short at byte %llu", s->path, (unsigned long long)s->off);
    PD_TRY(pd__pread_all(s->fd, s->path, buf, n, (int64_t)s->off));
    s->crc = (uint32_t)crc32_z(s->crc, buf, n);
    s->off += n;
    return PD_OK;
}

pd_status pd__ckpt_stream_read(pd__ckpt_stream *s, void *buf, size_t n) {
    if (n > s->left) return pd__err(PD_ERR_INTERNAL, "%s: a read past the record's data", s->path);
    PD_TRY(pd__stream_raw(s, buf, n));
    s->left -= n;
    return PD_OK;
}

/* What the callback left of the record's data: read for the CRC, or passed over. */
static pd_status pd__stream_skip(pd__ckpt_stream *s) {
    if (!s->sum) {
        s->off += s->left;
        s->left = 0;
    }
    while (s->left > 0)
        PD_TRY(pd__ckpt_stream_read(s, s->buf, s->left < PD_STREAM_CHUNK ? (size_t)s->left : PD_STREAM_CHUNK));
    return PD_OK;
}

/* One record: its header and name read and checked as pd__rec_next does,
 * "updates" into *step, the others to fn. */
static pd_status pd__stream_rec(pd__ckpt_stream *s, pd__ckpt_rec_fn fn, void *ctx, int64_t *step) {
    unsigned char h[PD_REC_HDR];
    uint64_t at = s->off;
    pd__rec r;
    PD_TRY(pd__stream_raw(s, h, PD_REC_HDR));
    memcpy(&r.kind, h, 4);
    memcpy(&r.version, h + 4, 4);
    memcpy(&r.name_len, h + 8, 4);
    memcpy(&r.bytes, h + 12, 8);
    uint64_t rest = s->len - s->off;
    if (r.kind < PD_REC_WEIGHT || r.kind > PD_REC_META || r.name_len > rest || r.bytes > rest - r.name_len)
        return pd__err(PD_ERR_PARSE, "%s: a malformed record at byte %llu", s->path, (unsigned long long)at);
    char *name = PD_MALLOC((size_t)r.name_len + 1);
    if (!name) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_status st = pd__stream_raw(s, name, r.name_len);
    name[r.name_len] = 0;
    r.name = name;
    r.data = NULL;
    s->left = r.bytes;
    if (st == PD_OK && r.kind == PD_REC_META && r.bytes == 8 && pd__rec_is(&r, "updates"))
        st = pd__ckpt_stream_read(s, step, 8);
    else if (st == PD_OK && fn)
        st = fn(ctx, &r, s);
    if (st == PD_OK) st = pd__stream_skip(s);
    PD_FREE(name);
    return st;
}

/* Part file pf, which the manifest says has `bytes` bytes of CRC-32 crc at
 * `step`, checked (size, then CRC-32 in chunks, then its records and their
 * step: the order and messages of pd__parse) without being held. */
static pd_status pd__stream_check(pd__ckpt_stream *s, int64_t bytes, uint32_t crc) {
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) return pd__err(PD_ERR_IO, "%s: %s", s->path, strerror(errno));
    if ((uint64_t)sb.st_size != (uint64_t)bytes)
        return pd__err(PD_ERR_PARSE, "%s: %lld bytes, the manifest says %lld (truncated?)", s->path,
                       (long long)sb.st_size, (long long)bytes);
    if (s->sum) return PD_OK; /* summed while streamed */
    while (s->off < s->len) {
        uint64_t n = s->len - s->off;
        PD_TRY(pd__stream_raw(s, s->buf, n < PD_STREAM_CHUNK ? (size_t)n : PD_STREAM_CHUNK));
    }
    if (s->crc != crc)
        return pd__err(PD_ERR_PARSE, "%s: checksum mismatch (CRC-32 %u, the manifest says %u): corrupted", s->path,
                       s->crc, crc);
    s->off = 0;
    return PD_OK;
}

/* Part pf checked against the manifest's bytes, crc and step; with fn, each
 * record is streamed to it (every byte read once, the CRC-32 checked at the
 * end: fn may have seen a part that changed since it was opened, and the
 * caller then discards what it made). */
static pd_status pd__stream_part(const char *pf, int64_t bytes, uint32_t crc, int64_t step, pd__ckpt_rec_fn fn,
                                 void *ctx) {
    pd__ckpt_stream s = {.fd = -1, .path = pf, .len = (uint64_t)bytes, .sum = fn != NULL};
    struct stat sb;
    PD_TRY(pd__open_regular(pf, &s.fd, &sb));
    s.crc = (uint32_t)crc32_z(0, NULL, 0);
    pd_status st = (s.buf = PD_MALLOC(PD_STREAM_CHUNK)) ? pd__stream_check(&s, bytes, crc)
                                                         : pd__err(PD_ERR_NOMEM, "out of memory");
    s.crc = fn ? s.crc : (uint32_t)crc32_z(0, NULL, 0);
    int64_t at = -1;
    while (st == PD_OK && s.off < s.len) st = pd__stream_rec(&s, fn, ctx, &at);
    if (st == PD_OK && fn && s.crc != crc)
        st = pd__err(PD_ERR_PARSE, "%s: CRC-32 %u, the manifest says %u: changed since it was checked", pf, s.crc, crc);
    if (st == PD_OK && at >= 0 && at != step)
        st = pd__err(PD_ERR_PARSE, "%s: its records are at step %lld, the manifest says %lld", pf, (long long)at,
                     (long long)step);
    close(s.fd);
    PD_FREE(s.buf);
    return st;
}

pd_status pd__ckpt_part_stream(const pd__ckpt *c, int i, pd__ckpt_rec_fn fn, void *ctx) {
    char pf[4200];
    snprintf(pf, sizeof pf, "%s/part-%d.bin", c->path, i);
    return pd__stream_part(pf, (int64_t)c->lens[i], c->crcs[i], c->step, fn, ctx);
}

/* pd__ckpt_parse; keep false: each part is checked in chunks, never held (pd__ckpt_open). */
static pd_status pd__parse(const char *path, const void *text, size_t len, pd__ckpt_get_fn get, void *ctx, bool keep,
                           pd__ckpt *out) {
    pd__ckpt c;
    memset(&c, 0, sizeof c);
    char f[4200];
    snprintf(f, sizeof f, "%s/manifest.json", path);
    cJSON *m = cJSON_ParseWithLength((const char *)text, len);
    const cJSON *files = NULL, *info = NULL;
    pd_status st = pd__manifest_check(m, path, f, &c.step, &files, &info);
    if (st == PD_OK) {
        c.nparts = cJSON_GetArraySize(files);
        c.parts = PD_CALLOC((size_t)c.nparts + 1, sizeof(void *));
        c.lens = PD_CALLOC((size_t)c.nparts + 1, sizeof(size_t));
        c.crcs = PD_CALLOC((size_t)c.nparts + 1, sizeof(uint32_t));
        c.path = pd__strdup(path);
        c.info_json = cJSON_PrintUnformatted(info);
        if (!c.parts || !c.lens || !c.crcs || !c.path || !c.info_json) st = pd__err(PD_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; st == PD_OK && i < c.nparts; i++) {
        const cJSON *e = cJSON_GetArrayItem(files, i), *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        char want[32], pf[4200];
        snprintf(want, sizeof want, "part-%d.bin", i);
        int64_t bytes, crc, at;
        if (!cJSON_IsString(name) || strcmp(name->valuestring, want) != 0 ||
            !pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(e, "bytes"), 0, PD_CKPT_MAX_INT, &bytes) ||
            !pd__ckpt_json_int(cJSON_GetObjectItemCaseSensitive(e, "crc32"), 0, UINT32_MAX, &crc)) {
            st = pd__err(PD_ERR_PARSE, "%s: file entry %d is malformed", f, i);
            break;
        }
        snprintf(pf, sizeof pf, "%s/%s", path, want);
        c.crcs[i] = (uint32_t)crc;
        c.lens[i] = (size_t)bytes;
        if (!keep) { /* checked in chunks, never held */
            if ((st = pd__stream_part(pf, bytes, (uint32_t)crc, c.step, NULL, NULL)) != PD_OK) break;
            continue;
        }
        unsigned char *data;
        size_t n;
        if ((st = get(ctx, pf, &data, &n)) != PD_OK) break;
        c.parts[i] = data;
        c.lens[i] = n;
        if ((uint64_t)n != (uint64_t)bytes)
            st = pd__err(PD_ERR_PARSE, "%s: %zu bytes, the manifest says %lld (truncated?)", pf, n, (long long)bytes);
        else if (pd__crc(data, n) != (uint32_t)crc)
            st = pd__err(PD_ERR_PARSE, "%s: checksum mismatch (CRC-32 %u, the manifest says %lld): corrupted", pf,
                         pd__crc(data, n), (long long)crc);
        else if ((st = pd__part_step(data, n, pf, &at)) == PD_OK && at >= 0 && at != c.step)
            st = pd__err(PD_ERR_PARSE, "%s: its records are at step %lld, the manifest says %lld", pf, (long long)at,
                         (long long)c.step);
    }
    cJSON_Delete(m);
    if (st != PD_OK) {
        pd__ckpt_free(&c);
        return st;
    }
    *out = c;
    return PD_OK;
}

pd_status pd__ckpt_parse(const char *path, const void *text, size_t len, pd__ckpt_get_fn get, void *ctx,
                         pd__ckpt *out) {
    return pd__parse(path, text, len, get, ctx, true, out);
}

static pd_status pd__get_file(void *ctx, const char *path, unsigned char **data, size_t *len) {
    (void)ctx;
    return pd__read_file(path, data, len);
}

static pd_status pd__read_dir(const char *path, bool keep, pd__ckpt *out) {
    char f[4200];
    snprintf(f, sizeof f, "%s/manifest.json", path);
    unsigned char *text;
    size_t len;
    PD_TRY(pd__read_file(f, &text, &len));
    pd_status st = pd__parse(path, text, len, pd__get_file, NULL, keep, out);
    PD_FREE(text);
    return st;
}

pd_status pd__ckpt_read(const char *path, pd__ckpt *out) { return pd__read_dir(path, true, out); }
pd_status pd__ckpt_open(const char *path, pd__ckpt *out) { return pd__read_dir(path, false, out); }

static pd_status pd__latest(const char *dir, bool keep, pd__ckpt *out, void (*warn)(void *ctx, const char *msg),
                            void *ctx) {
    int64_t *s;
    int n;
    PD_TRY(pd__ckpt_list(dir, &s, &n, false));
    pd_status st = pd__err(PD_ERR_IO, "%s: no checkpoint there", dir);
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/ckpt-%012" PRId64, dir, s[i]);
        if ((st = pd__read_dir(p, keep, out)) == PD_OK) break;
        if (warn) {
            char msg[1200];
            snprintf(msg, sizeof msg, "skipping %s: %s", p, pd_last_error());
            warn(ctx, msg);
        }
        st = pd__err(PD_ERR_IO, "%s: no valid checkpoint there", dir);
    }
    PD_FREE(s);
    return st;
}

pd_status pd__ckpt_read_latest(const char *dir, pd__ckpt *out, void (*warn)(void *ctx, const char *msg), void *ctx) {
    return pd__latest(dir, true, out, warn, ctx);
}

pd_status pd__ckpt_open_latest(const char *dir, pd__ckpt *out, void (*warn)(void *ctx, const char *msg), void *ctx) {
    return pd__latest(dir, false, out, warn, ctx);
}

/* ---- resume checks ---- */

static void pd__json_value(const cJSON *v, char *buf, size_t n) {
    if (!v) snprintf(buf, n, "(none)");
    else if (cJSON_IsString(v)) snprintf(buf, n, "'%s'", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
    else snprintf(buf, n, "(an object)");
}

const char *pd__ckpt_info_diff(const cJSON *expect, const cJSON *got, const char *const *skip, char *was, char *now,
                               size_t n) {
    for (const cJSON *e = expect ? expect->child : NULL; e; e = e->next) {
        bool skipped = false;
        for (int i = 0; skip && skip[i] && !skipped; i++) skipped = !strcmp(e->string, skip[i]);
        if (skipped) continue;
        const cJSON *v = cJSON_GetObjectItem(got, e->string);
        if (v && cJSON_Compare(e, v, true)) continue;
        pd__json_value(v, was, n);
        pd__json_value(e, now, n);
        return e->string;
    }
    return NULL;
}

/* ---- the writer thread -------------------------------------------------------- */

struct pd__ckpt_writer {
    char *dir;
    int keep;
    int dist;            /* > 0: one of several processes writing checkpoints of `dist` parts */
    bool final;          /* ... and the one that writes the manifest */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, quit;     /* busy: a snapshot is handed over and not yet written */
    int cancel;          /* the run failed: stop waiting for other processes' parts (atomic) */
    bool (*stop)(void *);                 /* pd__ckpt_writer_watch's: the run failed elsewhere */
    void (*failed)(void *, const char *); /* ... and this writer's error, told to the run */
    void *wctx;
    int64_t step;
    char *info;
    int nparts;
    const void *const *parts;
    const size_t *lens;
    void (*release)(void *);
    void *ctx;
    pd_status err;
    char errmsg[1024];
    int64_t written, last_step, done_step; /* done: the last one finished, written or failed */
    double last_ms;
};

static void *pd__writer_main(void *arg) {
    pd__ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy) break;
        pthread_mutex_unlock(&w->mu);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        pd_status st = PD_OK;
        if (w->dist > 0) { /* this process's parts; the manifest once every process's are in */
            for (int i = 0; st == PD_OK && i < w->nparts; i++)
                if (w->parts[i]) st = pd__ckpt_write_part(w->dir, w->step, i, w->parts[i], w->lens[i]);
            if (st == PD_OK && w->release) w->release(w->ctx), w->release = NULL;
            if (st == PD_OK && w->final)
                st = pd__finalize(w->dir, w->step, w->info, w->dist, w->keep, 600, &w->cancel, w->stop, w->wctx);
        } else {
            st = pd__ckpt_write(w->dir, w->step, w->info, w->nparts, w->parts, w->lens, w->keep);
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (w->release) w->release(w->ctx);
        w->release = NULL;
        pthread_mutex_lock(&w->mu);
        bool tell = st != PD_OK && w->err == PD_OK && w->failed;
        if (st != PD_OK && w->err == PD_OK) {
            w->err = st;
            snprintf(w->errmsg, sizeof w->errmsg, "checkpoint at step %lld: %s", (long long)w->step, pd_last_error());
        }
        if (tell) { /* the run stops (outside w->mu: the stages' threads take it to submit) */
            char msg[sizeof w->errmsg];
            snprintf(msg, sizeof msg, "%s", w->errmsg);
            pthread_mutex_unlock(&w->mu);
            w->failed(w->wctx, msg);
            pthread_mutex_lock(&w->mu);
        }
        if (st == PD_OK) {
            w->written++;
            w->last_step = w->step;
            w->last_ms = 1e3 * (double)(b.tv_sec - a.tv_sec) + 1e-6 * (double)(b.tv_nsec - a.tv_nsec);
        }
        w->done_step = w->step;
        PD_FREE(w->info);
        w->info = NULL;
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

pd_status pd__ckpt_writer_start(const char *dir, int keep, pd__ckpt_writer **out) {
    return pd__ckpt_writer_start_dist(dir, keep, 0, true, out);
}

pd_status pd__ckpt_writer_start_dist(const char *dir, int keep, int nparts, bool final, pd__ckpt_writer **out) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return pd__err(PD_ERR_IO, "%s: cannot create the checkpoint folder: %s", dir, strerror(errno));
    int64_t *s;
    int n;
    PD_TRY(pd__ckpt_list(dir, &s, &n, final)); /* clears what a killed writer left (one process does) */
    PD_FREE(s);
    pd__ckpt_writer *w = PD_CALLOC(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        PD_FREE(w);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    w->keep = keep;
    w->done_step = -1;
    w->dist = nparts;
    w->final = final;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, pd__writer_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        PD_FREE(w->dir);
        PD_FREE(w);
        return pd__err(PD_ERR_NOMEM, "cannot start the checkpoint writer");
    }
    *out = w;
    return PD_OK;
}

void pd__ckpt_writer_submit(pd__ckpt_writer *w, int64_t step, const char *info_json, int nparts,
                            const void *const *parts, const size_t *lens, void (*release)(void *ctx), void *ctx) {
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    w->step = step;
    w->info = info_json ? strdup(info_json) : NULL;
    w->nparts = nparts;
    w->parts = parts;
    w->lens = lens;
    w->release = release;
    w->ctx = ctx;
    w->busy = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void pd__ckpt_writer_stats(pd__ckpt_writer *w, int64_t *written, double *last_persist_ms, int64_t *last_step) {
    pthread_mutex_lock(&w->mu);
    if (written) *written = w->written;
    if (last_persist_ms) *last_persist_ms = w->last_ms;
    if (last_step) *last_step = w->last_step;
    pthread_mutex_unlock(&w->mu);
}

int64_t pd__ckpt_writer_done(pd__ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    int64_t s = w->done_step;
    pthread_mutex_unlock(&w->mu);
    return s;
}

void pd__ckpt_writer_cancel(pd__ckpt_writer *w) { __atomic_store_n(&w->cancel, 1, __ATOMIC_RELEASE); }

void pd__ckpt_writer_watch(pd__ckpt_writer *w, bool (*stop)(void *ctx), void (*failed)(void *ctx, const char *msg),
                           void *ctx) {
    pthread_mutex_lock(&w->mu);
    w->stop = stop;
    w->failed = failed;
    w->wctx = ctx;
    pthread_mutex_unlock(&w->mu);
}

void pd__ckpt_writer_drain(pd__ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

pd_status pd__ckpt_writer_finish(pd__ckpt_writer *w) {
    if (!w) return PD_OK;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pd_status st = w->err != PD_OK ? pd__err(w->err, "%s", w->errmsg) : PD_OK;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    PD_FREE(w->dir);
    PD_FREE(w);
    return st;
}

int64_t pd__ckpt_auto_every(double step_ms, double snapshot_ms, double persist_ms, double overhead) {
    if (!(step_ms > 0)) return 1;
    double k = 1, cost = (snapshot_ms > 0 ? snapshot_ms : 0) + (persist_ms > 0 ? persist_ms : 0);
    if (overhead > 0) k = cost / (overhead * step_ms);
    if (persist_ms / step_ms > k) k = persist_ms / step_ms;
    if (!(k < 1e15)) return INT64_MAX / 4;
    int64_t n = (int64_t)k;
    if ((double)n < k) n++;
    return n < 1 ? 1 : n;
}
