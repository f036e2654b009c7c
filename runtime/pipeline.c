/* pipeline.c - a plan trained as a pipeline in one process: one thread per
 * stage (replica) walks its instruction list (core/schedule.c); activations
 * go forward and gradients backward through bounded queues between
 * neighbouring stages, over the session's slabs (runtime/session.c).
 * Weight versions, links, Bi-Partition and threads: docs/INTERNALS.md,
 * "runtime/pipeline.c". One file per concern (pipeline_impl.h declares what
 * they share): _create (set-up), _queue (queues, SEND/RECV), _data (rows,
 * seeds, losses), _compute (F, B, W, versions, recomputation), _grads
 * (ALLREDUCE, STEP, ties, the norm), _snap (snapshots, resume), _run (the
 * threads), _mpi (ranks, the gather), _dev (GPU stages); this file: the
 * statistics and the trace. */
#include "pipeline_impl.h"


int64_t pd__ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pd_status pd__pipe_set_vertical_sync(pd__pipe *p, bool on) {
    if (on && p->kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "opt->vertical_sync goes with the pipedream schedule, not %s", pd__sched_kind_name(p->kind));
    for (int w = 0; on && w < p->nworkers; w++) /* a version number counts updates, which a replicated stage makes per round */
        if (p->rep[w] > 1)
            return pd__err(PD_ERR_UNSUPPORTED,
                           "opt->vertical_sync: stage %d is replicated (%d replicas), so it updates once per round of %d "
                           "microbatches and its versions are not stage 0's; not supported",
                           w, p->rep[w], p->rep[w]);
    p->vertical_sync = on;
    return PD_OK;
}

int pd__pipe_stages(const pd__pipe *p) { return p ? p->nworkers : 0; }
int pd__pipe_labels_input(const pd__pipe *p) { return p ? p->labels_input : -1; }
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb) {
    p->fail_stage = stage;
    p->fail_op = op;
    p->fail_mb = mb;
}

void pd__pipe_inject_env(pd__pipe *p) {
    const char *v = getenv("PDONNX_TEST_FAIL");
    char op[16];
    int s, mb;
    if (!v || sscanf(v, "%d:%15[A-Z_]:%d", &s, op, &mb) != 3) return;
    for (int k = 0; strcmp(pd__op_name(k), "?") != 0; k++)
        if (strcmp(pd__op_name(k), op) == 0) pd__pipe_inject_failure(p, s, k, mb);
}

void pd__pipe_stats_get(const pd__pipe *p, int s, pd__pipe_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p || s < 0 || s >= p->nworkers) return;
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        if (W->w != s) continue;
        if (W->busy_ms > out->busy_ms) out->busy_ms = W->busy_ms;
        if (W->peak_act > out->peak_act_mbs) out->peak_act_mbs = W->peak_act;
        if (W->recomputes > out->recomputes) out->recomputes = W->recomputes;
        for (int c = 0; c < p->nchunks; c++)
            if (W->ch[c].peak_versions > out->peak_versions) out->peak_versions = W->ch[c].peak_versions;
    }
    double rest = 0;
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[c * p->nworkers + s];
        out->act_bytes_per_mb += S->act_bytes;
        out->keep_bytes_per_mb += S->keep_bytes;
        rest += S->act_bytes - S->keep_bytes;
    }
    if (!p->recompute) out->keep_bytes_per_mb = out->act_bytes_per_mb, rest = 0;
    out->peak_act_bytes = out->peak_act_mbs * out->keep_bytes_per_mb + (out->peak_act_mbs > 0 ? rest : 0);
}

int pd__pipe_peak_versions(const pd__pipe *p, int s) {
    pd__pipe_stats st;
    pd__pipe_stats_get(p, s, &st);
    return st.peak_versions;
}

double pd__pipe_last_run_ms(const pd__pipe *p) { return p ? p->last_ms : 0; }
pd_status pd__pipe_slabs(pd__pipe *p, pd__slabs *out) { return pd__session_slabs(p->s, out); }
pd_status pd__pipe_slabs_changed(pd__pipe *p) { return p->gready ? pd__dev_push_weights(p) : PD_OK; }

/* The events of this process's threads (pid: the rank). */
static void pd__trace_events(const pd__pipe *p, pd__trace *t) {
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        if (p->rank_of[i] != p->rank) continue;
        char name[64], args[48];
        if (W->nrep > 1) snprintf(name, sizeof name, "stage %d replica %d", W->w, W->r);
        else snprintf(name, sizeof name, "stage %d", W->w);
        pd__trace_name(t, p->rank, i, name);
        if (p->remote) {
            snprintf(name, sizeof name, "rank %d", p->rank);
            pd__trace_name(t, p->rank, -1, name);
        }
        for (int e = 0; e < W->nev; e++) {
            const pd__ev *v = &W->ev[e];
            const char *op = pd__op_name(v->op);
            if (p->nchunks > 1) snprintf(name, sizeof name, "%s%d.%d", op, (int)v->mb, (int)v->chunk);
            else if (v->op == PD_I_STEP || v->op == PD_I_ALLREDUCE) snprintf(name, sizeof name, "%s", op);
            else snprintf(name, sizeof name, "%s%d", op, (int)v->mb);
            snprintf(args, sizeof args, "\"mb\":%d,\"chunk\":%d", (int)v->mb, (int)v->chunk);
            pd__trace_event(t, name, op, 1e-3 * (double)v->t0, 1e-3 * (double)(v->t1 - v->t0), p->rank, i, args);
        }
    }
}

pd_status pd__pipe_trace_events(const pd__pipe *p, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = open_memstream(buf, len);
    if (!f) return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    pd__trace t = {f, false};
    pd__trace_events(p, &t);
    if (fclose(f) != 0 || !*buf) {
        free(*buf);
        *buf = NULL;
        return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    }
    return PD_OK;
}

pd_status pd__pipe_write_trace(const pd__pipe *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd__pipe_write_trace: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    pd__trace t = {f, false};
    fputs("[\n", f);
    pd__trace_events(p, &t);
    fputs("\n]\n", f);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    }
    pd_status st = pd__write_atomic(path, buf, len);
    free(buf);
    return st;
}

size_t pd__tbytes(const pd_graph *g, int t) {
    return (size_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype);
}
