/* pipeline.c - a plan trained as a pipeline in one process: one thread per
 * stage walks its instruction list (core/schedule.c); activations go forward
 * and gradients backward through bounded queues between neighbouring stages.
 *
 * The machinery is the session's (runtime/session.c): one pd_session over the
 * whole graph chooses the trained parameters and owns the parameter, gradient
 * and optimizer-state slabs; each stage updates only its own parameters'
 * ranges of them. Every microbatch in flight on a stage has an activation
 * context (session.h) of its own, a slot chosen by mb mod slots.
 *
 * Weight versions (docs/SCHEDULES.md): every F and B names the version it
 * uses. The live weights are the session's slab; when a STEP would overwrite
 * a version that a later instruction of the stage still names, the stage
 * first copies it into a stash (its parameters packed) and re-points the
 * microbatches in flight on it. A stash is freed after the last instruction
 * naming its version, so a stage holds exactly the versions its list needs:
 * PipeDream's weight stashing, 2BW's double buffer, and one version for the
 * flush schedules. A B whose version differs from its F's is an error.
 *
 * Link s (stage s -> s+1) carries the tensors made at or before stage s that
 * a later stage reads (a skip connection passes through the stages between),
 * and, backward, the gradients made after s and used at or before it. A
 * message is one packed copy of them; within the process the receiver does
 * not unpack it: its views of those tensors point into the buffer, which
 * goes back to the link's pool when the microbatch's B (W) and SEND_GRAD
 * are done (across processes the transport's buffer is copied out).
 * Bi-Partition (a node's backward on another stage than its forward; only
 * nodes without parameters): a backward's inputs and outputs count as read
 * by its stage, so a later backward's activations travel forward with the
 * activations, and an earlier
 * one's travel back with the gradients (made after s, read by a backward at
 * or before s).
 * Links are between virtual stages (interleaved: k on worker k % P to k+1);
 * a receive takes the message of its microbatch (a replicated stage's
 * replicas share their links).
 *
 * Threads: one per replica of each worker (pd__wk), each with a chunk state
 * (pd__chunk) per virtual stage of its worker. Every thread records its
 * instructions' start and end (a preallocated array, one writer) for the
 * statistics and the trace.
 *
 * One file per concern, their shared declarations in pipeline_impl.h:
 * pipeline_create.c (set-up, teardown), pipeline_queue.c (queues, the
 * in-process transport, SEND/RECV), pipeline_data.c (a microbatch's rows,
 * seed and loss), pipeline_compute.c (F, B, W, weight versions,
 * recomputation), pipeline_grads.c (ALLREDUCE, STEP, tied weights, the
 * norm), pipeline_snap.c (snapshots, resume), pipeline_run.c (the stage
 * threads, a run), pipeline_mpi.c (ranks, the final gather); this file: the
 * statistics and the trace. A GPU stage's side is in pipeline_dev.c.
 */
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
