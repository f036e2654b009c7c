/* stageload.c - per-stage loading and saving for pipelines over a graph
 * loaded with lazy_weights: pd__pipe_load_stages reads the weights of the
 * stages this process runs into the sparse session's slabs;
 * pd__pipe_save_stages writes each stage's trained tensors, from the
 * process holding its replica 0, as external data beside the saved model.
 * Why and how: docs/DISTRIBUTED.md, "Per-stage loading". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pipeline_impl.h"

/* Whether this process runs thread i (every thread in one process). */
static bool pd__here(const pd__pipe *p, int i) { return !p->remote || p->rank_of[i] == p->rank; }

pd_status pd__pipe_load_stages(pd__pipe *p) {
    if (!p || p->loaded) return PD_OK;
    for (int i = 0; i < p->nwk; i++) {
        if (!pd__here(p, i)) continue;
        const pd__wk *W = &p->wk[i];
        for (int c = 0; c < p->nchunks; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            for (int j = 0; j < S->np; j++) PD_TRY(pd__session_load_param(p->s, S->params[j]));
            for (int j = 0; j < S->nsp; j++) PD_TRY(pd__session_load_param(p->s, S->sp[j]));
        }
    }
    p->loaded = true;
    return PD_OK;
}

void pd__wk_zero_grads(const pd__pipe *p, pd__wk *W) {
    if (!W->grads || !pd__here(p, (int)(W - p->wk))) return;
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            memset(W->grads + p->sl.poff[i], 0, sizeof(float) * (size_t)p->g->tensors[p->sl.param[i]].numel);
        }
    }
}

/* Stage k's file: "<model>.stage<k>.bin" beside the saved model, and its
 * name there (the location the model refers to). */
static void pd__stage_file(const char *model, int k, char *path, size_t n, const char **loc) {
    snprintf(path, n, "%s.stage%d.bin", model, k);
    const char *slash = strrchr(path, '/');
    *loc = slash ? slash + 1 : path;
}

/* The float values of stage k's j-th tensor (its parameters, then its
 * BatchNorm statistics, which replica 0's contexts hold), and the tensor. */
static const float *pd__stage_item(const pd__pipe *p, int k, int j, int *t) {
    const pd__vstage *S = &p->vs[k];
    if (j < S->np) {
        int i = S->params[j];
        *t = p->sl.param[i];
        return p->sl.params + p->sl.poff[i];
    }
    *t = S->bufs[j - S->np];
    int owner = p->wbase[k % p->nworkers];
    return pd__actx_value(p->wk[owner].ch[k / p->nworkers].slot[0], *t)->data;
}

static int pd__stage_items(const pd__pipe *p, int k) { return p->vs[k].np + p->vs[k].nbufs; }

/* Writes stage k's tensors to path (a temporary file renamed into place). */
static pd_status pd__write_stage(const pd__pipe *p, int k, const char *path) {
    PD_TRY(pd__check_dest(path));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    pd_status st = PD_OK;
    for (int j = 0; j < pd__stage_items(p, k) && st == PD_OK; j++) {
        int t;
        const char *d = (const char *)pd__stage_item(p, k, j, &t);
        const pd__tensor *x = &p->g->tensors[t];
        if (x->dtype != PD_FLOAT) continue;
        size_t len = sizeof(float) * (size_t)x->numel, off = 0;
        while (off < len && st == PD_OK) {
            ssize_t w = write(fd, d + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
            else off += (size_t)w;
        }
    }
    if (fsync(fd) != 0 && st == PD_OK) st = pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == PD_OK) st = pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (st == PD_OK && rename(tmp, path) != 0) st = pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (st != PD_OK) unlink(tmp);
    return st;
}

/* Every stage's tensors point at their place in its file (the same layout
 * on every process: shapes only). */
static pd_status pd__point_at_stages(pd__pipe *p, const char *model) {
    char path[4200];
    for (int k = 0; k < p->nvstages; k++) {
        const char *loc;
        pd__stage_file(model, k, path, sizeof path, &loc);
        int64_t off = 0;
        for (int j = 0; j < pd__stage_items(p, k); j++) {
            int t;
            (void)pd__stage_item(p, k, j, &t);
            pd__tensor *x = &p->g->tensors[t];
            if (x->dtype != PD_FLOAT) continue;
            PD_FREE(x->ext_loc);
            if (!(x->ext_loc = pd__strdup(loc))) return pd__err(PD_ERR_NOMEM, "out of memory");
            x->ext_off = off;
            off += (int64_t)sizeof(float) * x->numel;
        }
    }
    return PD_OK;
}

pd_status pd__pipe_save_stages(pd__pipe *p, const char *model) {
    if (!p || !model) return pd__err(PD_ERR_INVALID, "pd__pipe_save_stages: NULL argument");
    if (strlen(model) > 4000) return pd__err(PD_ERR_INVALID, "%s: path too long", model);
    char path[4200];
    pd_status st = PD_OK;
    for (int k = 0; k < p->nvstages && st == PD_OK; k++) {
        if (!pd__here(p, p->wbase[k % p->nworkers]) || pd__stage_items(p, k) == 0) continue;
        const char *loc;
        pd__stage_file(model, k, path, sizeof path, &loc);
        st = pd__write_stage(p, k, path);
    }
    if (p->remote) { /* every file is written (or one failed) before any model refers to them */
        char why[512] = "";
        if (st != PD_OK) snprintf(why, sizeof why, "%s", pd_last_error());
        double bad = st != PD_OK;
        pd_status ar = p->remote->vt->allreduce(p->remote, -1, &bad, 1, true);
        if (ar != PD_OK) return ar;
        if (st != PD_OK) return pd__err(st, "%s", why);
        if (bad > 0) return pd__err(PD_ERR_IO, "%s: another process failed to write its stage's file", model);
    }
    return st == PD_OK ? pd__point_at_stages(p, model) : st;
}
