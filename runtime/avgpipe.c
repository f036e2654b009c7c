/* avgpipe.c - AvgPipe's parallel pipelines with elastic averaging, in one
 * process: K pd__pipe (runtime/pipeline.c), each over its own graph copy,
 * run concurrently (a thread each, which runs its stages' threads) on their
 * own minibatches; every `every` steps their weights and a centre variable
 * pull toward each other (pd__elastic_update). avgpipe.h gives the rule.
 */
#include "avgpipe.h"

#include "../core/schedule.h"
#include "comm/transport.h"
#include "pipeline.h"
#include "session.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

void pd__elastic_update(float *const *x, int K, float *centre, int64_t n, double alpha) {
    for (int64_t j = 0; j < n; j++) {
        double c = centre[j], pull = 0;
        for (int i = 0; i < K; i++) {
            double d = (double)x[i][j] - c;
            pull += d;
            x[i][j] = (float)((double)x[i][j] - alpha * d);
        }
        centre[j] = (float)(c + alpha * pull);
    }
}

struct pd__avg {
    int K, M, every;
    double alpha;
    const pd_graph *g0; /* pipeline 0's graph (the caller's) */
    pd__pipe **pipe;   /* K */
    float **x;         /* K: each pipeline's live parameter slab (borrowed) */
    float *centre;     /* n */
    int64_t n;
    int64_t steps;     /* steps done by earlier runs */
    int64_t updates;
    double last_ms;
    /* under MPI: this process runs one stage of pipeline `me` (pipe[0], x[0]);
     * peers: the processes holding the same stage of every pipeline */
    bool mpi;
    int me;
    pd__mpi_group *peers;
    double *d;         /* n: x - centre, summed across the peers (in double, as the one-process update) */
};

static bool pd__avg_on(const pd__avg *a) { return a->alpha > 0 && a->every > 0; }

int pd__avg_pipelines(const pd__avg *a) { return a ? a->K : 0; }
int pd__avg_mine(const pd__avg *a) { return a && a->mpi ? a->me : 0; }
struct pd__pipe *pd__avg_pipe(pd__avg *a, int i) {
    return a && i >= 0 && i < (a->mpi ? 1 : a->K) ? a->pipe[i] : NULL; /* under MPI: this process's */
}
int64_t pd__avg_updates(const pd__avg *a) { return a ? a->updates : 0; }
int64_t pd__avg_steps(const pd__avg *a) { return a ? a->steps : 0; }
double pd__avg_last_run_ms(const pd__avg *a) { return a ? a->last_ms : 0; }

const float *pd__avg_centre(pd__avg *a, int64_t *n) {
    if (!a) return NULL;
    if (!pd__avg_on(a)) /* no centre kept: the pipelines' mean */
        for (int64_t j = 0; j < a->n; j++) {
            double s = 0;
            for (int i = 0; i < a->K; i++) s += a->x[i][j];
            a->centre[j] = (float)(s / a->K);
        }
    if (n) *n = a->n;
    return a->centre;
}

void pd__avg_destroy(pd__avg *a) {
    if (!a) return;
    int local = a->mpi ? 1 : a->K;
    if (a->centre && a->x && !a->mpi) {
        pd__avg_centre(a, NULL);
        for (int i = 0; i < local; i++)
            if (a->x[i]) memcpy(a->x[i], a->centre, sizeof(float) * (size_t)a->n);
    }
    for (int i = 0; a->pipe && i < local; i++) pd__pipe_destroy(a->pipe[i]); /* the centre goes back into g[i] */
    pd__mpi_group_free(a->peers);
    PD_FREE(a->d);
    PD_FREE(a->pipe);
    PD_FREE(a->x);
    PD_FREE(a->centre);
    PD_FREE(a);
}

pd_status pd__avg_create(pd_graph *const *g, int K, const pd_plan *plan, const pd_train_options *o,
                         pd__sched_kind kind, int microbatches, double alpha, int every, pd__avg **out) {
    if (!g || !plan || !out) return pd__err(PD_ERR_INVALID, "pd__avg_create: NULL argument");
    if (K < 1 || K > 256) return pd__err(PD_ERR_INVALID, "avgpipe: %d parallel pipelines (expected 1 to 256)", K);
    if (!(alpha >= 0) || alpha * K > 1)
        return pd__err(PD_ERR_INVALID,
                       "avgpipe: the elastic alpha %g with %d pipelines: the elastic update needs 0 <= alpha <= 1/K", alpha,
                       K);
    if (every < 0) return pd__err(PD_ERR_INVALID, "avgpipe: averaging every %d steps (0 or more)", every);
    if (pd__sched_async(kind))
        return pd__err(PD_ERR_UNSUPPORTED,
                       "avgpipe: the parallel pipelines average between minibatches, so each runs a flushing schedule "
                       "(avgpipe, flush, gpipe, zb-h1, interleaved), not %s",
                       pd__sched_kind_name(kind));
    pd__avg *a = PD_CALLOC(1, sizeof *a);
    if (!a) return pd__err(PD_ERR_NOMEM, "out of memory");
    a->K = K;
    a->g0 = g[0];
    a->M = microbatches;
    a->alpha = alpha;
    a->every = every;
    a->pipe = PD_CALLOC((size_t)K, sizeof *a->pipe);
    a->x = PD_CALLOC((size_t)K, sizeof *a->x);
    pd_status st = a->pipe && a->x ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < K && st == PD_OK; i++) {
        if (!g[i]) {
            st = pd__err(PD_ERR_INVALID, "avgpipe: pipeline %d has no graph", i);
            break;
        }
        st = pd__pipe_create(g[i], plan, o, kind, microbatches, &a->pipe[i]);
        pd__slabs sl;
        if (st == PD_OK) st = pd__pipe_slabs(a->pipe[i], &sl);
        if (st != PD_OK) break;
        if (i > 0 && sl.total != a->n) {
            st = pd__err(PD_ERR_INVALID, "avgpipe: pipeline %d has %lld trained floats, pipeline 0 %lld", i,
                         (long long)sl.total, (long long)a->n);
            break;
        }
        a->n = sl.total;
        a->x[i] = sl.params;
    }
    if (st == PD_OK) {
        a->centre = PD_MALLOC(sizeof(float) * ((size_t)a->n + 1));
        if (!a->centre) st = pd__err(PD_ERR_NOMEM, "out of memory");
        /* the centre starts at the initial weights; the pipelines must too */
        for (int i = 1; st == PD_OK && i < K; i++)
            if (memcmp(a->x[i], a->x[0], sizeof(float) * (size_t)a->n) != 0)
                st = pd__err(PD_ERR_INVALID, "avgpipe: pipeline %d starts from other weights than pipeline 0", i);
        if (st == PD_OK) memcpy(a->centre, a->x[0], sizeof(float) * (size_t)a->n);
    }
    if (st != PD_OK) {
        PD_FREE(a->centre);
        a->centre = NULL; /* destroy must not overwrite the graphs with a centre never made */
        pd__avg_destroy(a);
        return st;
    }
    *out = a;
    return PD_OK;
}

pd_status pd__avg_create_mpi(pd_graph *g, int K, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                             int microbatches, double alpha, int every, int rank, int size, pd__avg **out) {
    pd__avg *a = NULL;
    PD_TRY(pd__avg_create(&g, 1, plan, o, kind, microbatches, 0, 0, &a)); /* this process's pipeline */
    a->K = K;
    a->alpha = alpha;
    a->every = every;
    a->mpi = true;
    pd__pipe *p = a->pipe[0];
    int per = pd__pipe_processes(p);
    pd_status st = PD_OK;
    if ((int64_t)per * K != size)
        st = pd__err(PD_ERR_INVALID,
                     "avgpipe: %d pipelines of %d processes each run as mpirun -np %d, not %d",
                     K, per, per * K, size);
    a->me = rank / (per > 0 ? per : 1);
    /* pipeline me's processes; then the peers: the same stage in every pipeline */
    if (st == PD_OK) st = pd__pipe_set_ranks_in(p, rank % per, per, a->me);
    if (st == PD_OK) st = pd__mpi_group_split(rank % per, a->me, &a->peers);
    if (st == PD_OK && !(a->d = PD_MALLOC(sizeof(double) * ((size_t)a->n + 1)))) st = pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) {
        pd__avg_destroy(a);
        return st;
    }
    *out = a;
    return PD_OK;
}

/* Across processes: each holds its stages' weights (the others stay at their
 * initial values, as does its centre of them, so their differences are 0) and
 * sums x - centre with the same stage's processes of the other pipelines. */
static pd_status pd__elastic_update_mpi(pd__avg *a) {
    float *x = a->x[0];
    for (int64_t j = 0; j < a->n; j++) a->d[j] = (double)x[j] - a->centre[j];
    PD_TRY(pd__mpi_group_allreduce(a->peers, a->d, a->n, true));
    for (int64_t j = 0; j < a->n; j++) {
        double c = a->centre[j], d = (double)x[j] - c;
        x[j] = (float)((double)x[j] - a->alpha * d);
        a->centre[j] = (float)(c + a->alpha * a->d[j]);
    }
    return PD_OK;
}

pd_status pd__avg_gather(pd__avg *a) {
    if (!a || !a->mpi) return PD_OK;
    if (pd__avg_on(a)) memcpy(a->x[0], a->centre, sizeof(float) * (size_t)a->n);
    else { /* no centre kept: the pipelines' mean, over the peers */
        for (int64_t j = 0; j < a->n; j++) a->d[j] = a->x[0][j];
        PD_TRY(pd__mpi_group_allreduce(a->peers, a->d, a->n, true));
        for (int64_t j = 0; j < a->n; j++) a->x[0][j] = (float)(a->d[j] / a->K);
    }
    return pd__pipe_gather(a->pipe[0]); /* every stage's, into every process's graph */
}

/* One pipeline's share of a run, on its own thread. */
typedef struct pd__avg_job {
    pd__pipe *pipe;
    int64_t steps;
    const pd_tensor *inputs, *labels;
    pd_step_result *res;
    pd_status st;
    char msg[1024];
} pd__avg_job;

static void *pd__avg_job_run(void *arg) {
    pd__avg_job *j = arg;
    j->st = pd__pipe_run(j->pipe, j->steps, j->inputs, j->labels, j->res);
    if (j->st != PD_OK) snprintf(j->msg, sizeof j->msg, "%s", pd_last_error());
    return NULL;
}

/* Rows [from, from + count) of t (NULL data stays NULL: an input the pipeline ignores). */
static pd_tensor pd__avg_rows(const pd_tensor *t, int64_t from, int64_t count) {
    pd_tensor v = *t;
    if (!t->data || t->ndim < 1 || t->shape[0] <= 0) return v;
    size_t row = (size_t)(pd_tensor_numel(t) / t->shape[0]) * pd_dtype_size(t->dtype);
    v.shape[0] = count;
    v.data = (char *)t->data + row * (size_t)from;
    return v;
}

static int64_t pd__avg_ns_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pd_status pd__avg_run(pd__avg *a, int64_t steps, const pd_tensor *const *inputs, const pd_tensor *labels,
                      pd_step_result *results, pd_step_result *per_pipe) {
    if (!a || !inputs || !labels || steps < 1) return pd__err(PD_ERR_INVALID, "pd__avg_run: bad arguments");
    int K = a->mpi ? 1 : a->K; /* pipelines run here */
    const pd_graph *g = a->g0;
    int nin = g->ninputs;
    int64_t rows = nin > 0 && g->tensors[g->inputs[0]].ndim > 0 ? g->tensors[g->inputs[0]].shape[0] : 1;
    int64_t B = rows * a->M; /* rows per step */
    bool ring = pd__pipe_ring(a->pipe[0]) > 0;
    for (int i = 0; i < K; i++)
        if (!inputs[i] || !labels[i].data || labels[i].ndim < 1 || (!ring && labels[i].shape[0] < steps * B))
            return pd__err(PD_ERR_SHAPE, "avgpipe: pipeline %d's labels do not hold %lld steps of %lld rows", i,
                           (long long)steps, (long long)B);
    pd_step_result *pr = PD_CALLOC((size_t)(K * steps), sizeof *pr);
    pd_tensor *view = PD_CALLOC((size_t)K * ((size_t)nin + 1), sizeof *view);
    pd__avg_job *job = PD_CALLOC((size_t)K, sizeof *job);
    pthread_t *th = PD_CALLOC((size_t)K, sizeof *th);
    pd_status st = pr && view && job && th ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    int64_t t0 = pd__avg_ns_now();
    for (int64_t done = 0; st == PD_OK && done < steps;) {
        int64_t chunk = steps - done;
        if (pd__avg_on(a) && chunk > a->every - a->steps % a->every) chunk = a->every - a->steps % a->every;
        for (int i = 0; i < K; i++) {
            pd_tensor *v = view + (size_t)i * ((size_t)nin + 1);
            for (int j = 0; j < nin; j++) v[j] = ring ? inputs[i][j] : pd__avg_rows(&inputs[i][j], done * B, chunk * B);
            v[nin] = ring ? labels[i] : pd__avg_rows(&labels[i], done * B, chunk * B);
            job[i] = (pd__avg_job){a->pipe[i], chunk, v, &v[nin], pr + i * steps + done, PD_OK, ""};
        }
        /* pipeline 0 on this thread, the others on their own */
        int started = 0;
        for (int i = 1; i < K; i++, started++)
            if (pthread_create(&th[i], NULL, pd__avg_job_run, &job[i]) != 0) {
                st = pd__err(PD_ERR_INTERNAL, "avgpipe: cannot start the thread of pipeline %d", i);
                break;
            }
        if (st == PD_OK) pd__avg_job_run(&job[0]);
        for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < K && st == PD_OK; i++)
            if (job[i].st != PD_OK) st = pd__err(job[i].st, "avgpipe: pipeline %d: %s", i, job[i].msg);
        if (st != PD_OK) break;
        done += chunk;
        a->steps += chunk;
        if (pd__avg_on(a) && a->steps % a->every == 0) {
            if (a->mpi) st = pd__elastic_update_mpi(a);
            else pd__elastic_update(a->x, K, a->centre, a->n, a->alpha);
            a->updates++;
            /* GPU stages: each run left its weights in the host slabs, where the update ran; they go back up */
            for (int i = 0; i < K && st == PD_OK; i++)
                if ((st = pd__pipe_slabs_changed(a->pipe[i])) != PD_OK) pd__err_prefix("avgpipe: pipeline %d", i);
        }
    }
    a->last_ms = (double)(pd__avg_ns_now() - t0) / 1e6;
    if (st == PD_OK && a->mpi) { /* every pipeline's losses: this one's row, summed across the peers */
        double *v = PD_CALLOC((size_t)(a->K * steps), sizeof(double));
        if (!v) st = pd__err(PD_ERR_NOMEM, "out of memory");
        for (int64_t t = 0; v && t < steps; t++) v[a->me * steps + t] = pr[t].loss;
        if (st == PD_OK) st = pd__mpi_group_allreduce(a->peers, v, a->K * steps, true);
        for (int64_t t = 0; st == PD_OK && t < steps; t++) {
            double loss = 0;
            for (int i = 0; i < a->K; i++) loss += v[i * steps + t];
            if (results) results[t] = pr[t], results[t].loss = loss / a->K;
            for (int i = 0; per_pipe && i < a->K; i++) {
                per_pipe[i * steps + t] = pr[t];
                per_pipe[i * steps + t].loss = v[i * steps + t];
            }
        }
        PD_FREE(v);
    }
    for (int64_t t = 0; st == PD_OK && !a->mpi && results && t < steps; t++) {
        double loss = 0;
        for (int i = 0; i < K; i++) loss += pr[i * steps + t].loss;
        results[t] = pr[t];
        results[t].loss = loss / K;
    }
    if (st == PD_OK && !a->mpi && per_pipe) memcpy(per_pipe, pr, sizeof *pr * (size_t)(K * steps));
    PD_FREE(pr);
    PD_FREE(view);
    PD_FREE(job);
    PD_FREE(th);
    return st;
}
