/* session_ckpt.c - checkpoints (checkpoint.h): the session as the records
 * of one stage (its BatchNorm statistics, step count, weights and optimizer
 * state), and back; on a device through the host mirror. */
#include "session_impl.h"
#include "checkpoint.h"

#include <stdio.h>
#include <string.h>

/* BatchNorm's running statistics: the initializers a training forward writes. */
static bool pd__is_buffer(const pd_graph *g, int t) {
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (pd__state_input(n, j) && n->in[j] == t) return g->tensors[t].kind == PD_T_INIT;
    }
    return false;
}

void pd__session_snapshot(const pd_session *s, pd__recw *w) {
    const pd_graph *g = s->g;
    /* on CUDA, the device's values into the host mirror first (an error here
     * leaves the mirror as the last pull: the records' checksums still hold) */
    (void)pd__sdev_pull(s, false);
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (pd__state_input(n, j) && t >= 0 && g->tensors[t].kind == PD_T_INIT)
                pd__rec_put(w, PD_REC_BUFFER, 0, g->tensors[t].name, s->views[t].data,
                            (uint64_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype));
        }
    }
    int64_t u = s->step;
    pd__rec_put(w, PD_REC_META, 0, "updates", &u, sizeof u);
    pd__rec_put(w, PD_REC_META, 0, "live/0", NULL, 0);
    for (int i = 0; i < s->np; i++) {
        const pd__tensor *x = &g->tensors[s->param[i]];
        uint64_t b = (uint64_t)x->numel * sizeof(float);
        pd__rec_put(w, PD_REC_WEIGHT, 0, x->name, s->params + s->poff[i], b);
        if (s->state0) pd__rec_put(w, PD_REC_STATE0, 0, x->name, s->state0 + s->poff[i], b);
        if (s->state1) pd__rec_put(w, PD_REC_STATE1, 0, x->name, s->state1 + s->poff[i], b);
    }
}

pd_status pd__session_restore(pd_session *s, const void *part, size_t len) {
    const pd_graph *g = s->g;
    int64_t want = 2, got = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            want += pd__state_input(&g->nodes[i], j) && g->nodes[i].in[j] >= 0 &&
                    g->tensors[g->nodes[i].in[j]].kind == PD_T_INIT;
    want += (int64_t)s->np * (1 + (s->state0 != NULL) + (s->state1 != NULL));
    size_t off = 0;
    for (;;) {
        pd__rec r;
        bool end;
        PD_TRY(pd__rec_next(part, len, &off, &r, &end, "the checkpoint's part"));
        if (end) break;
        if (r.kind == PD_REC_META) {
            if (pd__rec_is(&r, "updates") && r.bytes == 8) memcpy(&s->step, r.data, 8), got++;
            else if (pd__rec_is(&r, "live/0") && r.version == 0) got++;
            else return pd__err(PD_ERR_INVALID, "the checkpoint has weight versions a single stage does not keep");
            continue;
        }
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)(r.name_len < 511 ? r.name_len : 511), r.name);
        int t = pd__graph_find(g, name);
        if (t < 0) return pd__err(PD_ERR_INVALID, "the checkpoint holds '%s', which %s does not have", name, g->path);
        int i = 0;
        while (i < s->np && s->param[i] != t) i++;
        void *dst = NULL;
        if (r.kind == PD_REC_BUFFER && pd__is_buffer(g, t)) dst = s->views[t].data;
        else if (i < s->np && r.kind == PD_REC_WEIGHT) dst = s->params + s->poff[i];
        else if (i < s->np && r.kind == PD_REC_STATE0 && s->state0) dst = s->state0 + s->poff[i];
        else if (i < s->np && r.kind == PD_REC_STATE1 && s->state1) dst = s->state1 + s->poff[i];
        if (!dst)
            return pd__err(PD_ERR_INVALID, "the checkpoint's '%s' (record kind %u) has no place in this session "
                           "(another optimizer, or other tensors frozen?)", name, r.kind);
        if (r.bytes != (uint64_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype))
            return pd__err(PD_ERR_INVALID, "the checkpoint's '%s' has %llu bytes, the model's %lld", name,
                           (unsigned long long)r.bytes,
                           (long long)(g->tensors[t].numel * (int64_t)pd_dtype_size(g->tensors[t].dtype)));
        memcpy(dst, r.data, (size_t)r.bytes);
        got++;
    }
    if (got != want)
        return pd__err(PD_ERR_INVALID, "the checkpoint is incomplete: %lld of the %lld records a session needs",
                       (long long)got, (long long)want);
    return pd__sdev_push(s);
}
