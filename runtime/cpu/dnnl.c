/* dnnl.c - float32 convolution forward, backward-data and backward-weights
 * on oneDNN, the library PyTorch's CPU convolutions run on, and the small
 * float32 matrix products of batched MatMuls (attention's) on its sgemm.
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/dnnl.c".
 */
#include "nn_common.h"

#ifdef PD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS };
enum { MAX_ARGS = 4 };

typedef struct conv_key {
    int kind, threads, nsp;
    bool bias;
    int64_t N, C, M, group;
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} conv_key;

/* One argument of a primitive: our layout, the primitive's, and the reorder
 * between them (NULL when they are the same and no sum is needed). */
typedef struct conv_arg {
    int arg;         /* DNNL_ARG_* */
    bool out, add;   /* written by the primitive; added into ours (+=) */
    dnnl_memory_desc_t user, prim;
    dnnl_primitive_t reorder;
    size_t off;      /* of its buffer in the call's scratch, when reordered */
} conv_arg;

typedef struct conv_entry {
    conv_key key;
    dnnl_primitive_t prim; /* NULL: oneDNN declined this geometry */
    conv_arg args[MAX_ARGS];
    int nargs;
    dnnl_memory_desc_t pad_md;       /* oneDNN's scratchpad */
    size_t pad_bytes, scratch_bytes; /* oneDNN's scratchpad at 0, then the layout buffers */
    struct conv_entry *next;
} conv_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_ran, g_declined; /* calls, under g_lock */
static conv_entry *g_cache;
static dnnl_engine_t g_engine;
static int g_state; /* 0 not tried, 1 ready, -1 off (no engine or PD_NO_ONEDNN) */

static void conv_entry_free(conv_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    for (int i = 0; i < e->nargs; i++)
        if (e->args[i].reorder) dnnl_primitive_destroy(e->args[i].reorder);
    free(e);
}

/* The cache lives for the process; this frees it (tests and tools that
 * check for leaks call it through pd__dnnl_release at exit). */
void pd__dnnl_release(void) {
    pthread_mutex_lock(&g_lock);
    while (g_cache) {
        conv_entry *e = g_cache;
        g_cache = e->next;
        conv_entry_free(e);
    }
    pthread_mutex_unlock(&g_lock);
}

static bool engine_ready(void) {
    /* under g_lock */
    if (g_state == 0) {
        const char *off = getenv("PD_NO_ONEDNN");
        g_state = (off && *off && strcmp(off, "0") != 0) ? -1
                  : dnnl_engine_create(&g_engine, dnnl_cpu, 0) == dnnl_success ? 1 : -1;
    }
    return g_state == 1;
}

static dnnl_format_tag_t plain_tag(int ndims) {
    static const dnnl_format_tag_t tags[] = {dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde, dnnl_abcdef};
    return tags[ndims - 1];
}

/* A float32 descriptor of dims in our plain layout, or with the layout left
 * to the primitive (any). */
static bool md_make(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, bool any) {
    dnnl_dims_t d = {0};
    for (int i = 0; i < ndims; i++) d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, any ? dnnl_format_tag_any : plain_tag(ndims)) ==
           dnnl_success;
}

/* The plain and "any" descriptors of X, W (grouped: (G, M/G, C/G, k...)), B, Y. */
typedef struct conv_mds {
    dnnl_memory_desc_t x, w, b, y, x_any, w_any, y_any;
} conv_mds;

static bool conv_mds_make(const conv_key *k, conv_mds *m) {
    int64_t xd[5] = {k->N, k->C}, yd[5] = {k->N, k->M}, wd[6], nw = 0;
    if (k->group > 1) wd[nw++] = k->group;
    wd[nw++] = k->M / k->group;
    wd[nw++] = k->C / k->group;
    for (int i = 0; i < k->nsp; i++) xd[2 + i] = k->in[i], yd[2 + i] = k->out[i], wd[nw++] = k->k[i];
    int nd = 2 + k->nsp;
    return md_make(&m->x, nd, xd, false) && md_make(&m->y, nd, yd, false) && md_make(&m->w, (int)nw, wd, false) &&
           md_make(&m->b, 1, &k->M, false) && md_make(&m->x_any, nd, xd, true) && md_make(&m->y_any, nd, yd, true) &&
           md_make(&m->w_any, (int)nw, wd, true);
}

static bool conv_desc(const conv_key *k, int kind, const conv_mds *m, dnnl_convolution_desc_t *cd) {
    dnnl_dims_t s = {0}, d = {0}, pl = {0}, pr = {0};
    for (int i = 0; i < k->nsp; i++) s[i] = k->s[i], d[i] = k->d[i] - 1, pl[i] = k->pb[i], pr[i] = k->pe[i];
    const dnnl_memory_desc_t *b = k->bias ? &m->b : NULL;
    dnnl_status_t st;
    if (kind == CONV_FWD)
        st = dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, dnnl_convolution_direct, &m->x_any,
                                                        &m->w_any, b, &m->y_any, s, d, pl, pr);
    else if (kind == CONV_BWD_DATA)
        st = dnnl_dilated_convolution_backward_data_desc_init(cd, dnnl_convolution_direct, &m->x_any, &m->w_any,
                                                              &m->y_any, s, d, pl, pr);
    else
        st = dnnl_dilated_convolution_backward_weights_desc_init(cd, dnnl_convolution_direct, &m->x_any, &m->w_any, b,
                                                                 &m->y_any, s, d, pl, pr);
    return st == dnnl_success;
}

/* The reorder between an argument's two layouts (into the primitive's for an
 * input; out of it, summing when `add`, for an output). */
static bool arg_reorder(conv_arg *a) {
    if (!a->add && dnnl_memory_desc_equal(&a->user, &a->prim)) return true;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    bool ok = true;
    if (a->add) {
        ok = dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    }
    dnnl_primitive_desc_t rpd = NULL;
    if (ok)
        ok = (a->out ? dnnl_reorder_primitive_desc_create(&rpd, &a->prim, g_engine, &a->user, g_engine, attr)
                     : dnnl_reorder_primitive_desc_create(&rpd, &a->user, g_engine, &a->prim, g_engine, attr)) ==
             dnnl_success;
    if (ok) ok = dnnl_primitive_create(&a->reorder, rpd) == dnnl_success;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* Argument `arg` of the primitive pd: ours is `user`, the primitive's the
 * idx-th descriptor of query q (the bias is the weights' second). */
static void add_arg(conv_entry *e, const_dnnl_primitive_desc_t pd, int arg, dnnl_query_t q, int idx,
                    const dnnl_memory_desc_t *user, bool out, bool add) {
    conv_arg *a = &e->args[e->nargs++];
    a->arg = arg, a->out = out, a->add = add, a->user = *user;
    a->prim = *dnnl_primitive_desc_query_md(pd, q, idx);
}

/* Builds the primitive of `key` and its reorders; e->prim stays NULL when
 * oneDNN declines (under g_lock). */
static void conv_entry_build(conv_entry *e) {
    const conv_key *k = &e->key;
    conv_mds m;
    if (!conv_mds_make(k, &m)) return;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fwd = NULL, pd = NULL;
    dnnl_convolution_desc_t cd;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return;
    bool ok = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->kind != CONV_FWD) { /* the backward's hint: the forward it is the backward of */
        conv_key fk = *k;
        fk.kind = CONV_FWD;
        dnnl_convolution_desc_t fd;
        ok = conv_desc(&fk, CONV_FWD, &m, &fd) && dnnl_primitive_desc_create(&fwd, &fd, NULL, g_engine, NULL) == dnnl_success;
    }
    ok = ok && conv_desc(k, k->kind, &m, &cd) && dnnl_primitive_desc_create(&pd, &cd, attr, g_engine, fwd) == dnnl_success;
    if (ok) {
        if (k->kind == CONV_FWD) {
            add_arg(e, pd, DNNL_ARG_SRC, dnnl_query_src_md, 0, &m.x, false, false);
            add_arg(e, pd, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, &m.w, false, false);
            if (k->bias) add_arg(e, pd, DNNL_ARG_BIAS, dnnl_query_weights_md, 1, &m.b, false, false);
            add_arg(e, pd, DNNL_ARG_DST, dnnl_query_dst_md, 0, &m.y, true, false);
        } else if (k->kind == CONV_BWD_DATA) {
            add_arg(e, pd, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, &m.y, false, false);
            add_arg(e, pd, DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, &m.w, false, false);
            add_arg(e, pd, DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md, 0, &m.x, true, true);
        } else {
            add_arg(e, pd, DNNL_ARG_SRC, dnnl_query_src_md, 0, &m.x, false, false);
            add_arg(e, pd, DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, &m.y, false, false);
            add_arg(e, pd, DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md, 0, &m.w, true, true);
        }
        e->pad_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->pad_bytes = pd__align64(dnnl_memory_desc_get_size(&e->pad_md));
        size_t off = e->pad_bytes;
        for (int i = 0; ok && i < e->nargs; i++) {
            conv_arg *a = &e->args[i];
            ok = arg_reorder(a);
            if (a->reorder) a->off = off, off += pd__align64(dnnl_memory_desc_get_size(&a->prim));
        }
        e->scratch_bytes = off;
        ok = ok && dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    if (!ok && e->prim) dnnl_primitive_destroy(e->prim), e->prim = NULL;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fwd) dnnl_primitive_desc_destroy(fwd);
    dnnl_primitive_attr_destroy(attr);
}

static const conv_entry *conv_lookup(const conv_key *key) {
    pthread_mutex_lock(&g_lock);
    conv_entry *e = NULL;
    if (engine_ready()) {
        for (e = g_cache; e; e = e->next)
            if (memcmp(&e->key, key, sizeof *key) == 0) break;
        if (!e && (e = calloc(1, sizeof *e))) {
            e->key = *key;
            conv_entry_build(e);
            e->next = g_cache;
            g_cache = e;
        }
    }
    if (e && e->prim) g_ran++;
    else g_declined++;
    pthread_mutex_unlock(&g_lock);
    return e && e->prim ? e : NULL;
}

void pd__dnnl_stats(int64_t *ran, int64_t *declined) {
    pthread_mutex_lock(&g_lock);
    *ran = g_ran, *declined = g_declined;
    pthread_mutex_unlock(&g_lock);
}

static void conv_key_make(conv_key *k, int kind, int threads, const pd__win *w, int64_t group, const pd_tensor *X,
                          const pd_tensor *W, bool bias) {
    memset(k, 0, sizeof *k); /* padding bytes too: keys compare with memcmp */
    k->kind = kind, k->threads = threads, k->nsp = w->nsp, k->bias = bias;
    k->N = X->shape[0], k->C = X->shape[1], k->M = W->shape[0], k->group = group;
    for (int i = 0; i < w->nsp; i++) {
        k->in[i] = w->in[i], k->out[i] = w->out[i], k->k[i] = w->k[i], k->s[i] = w->s[i], k->d[i] = w->d[i];
        k->pb[i] = w->pb[i], k->pe[i] = w->pe[i];
    }
}

/* Runs e on ptrs (one per argument, ours): inputs reordered in, the
 * primitive, outputs reordered (and summed) out. */
static pd_status conv_exec(pd__exec *x, const conv_entry *e, int threads, void *const *ptrs) {
    char *buf = e->scratch_bytes ? pd__scratch(x, e->scratch_bytes) : NULL;
    if (e->scratch_bytes && !buf) return PD_ERR_NOMEM;
#ifdef _OPENMP
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    dnnl_stream_t st = NULL;
    dnnl_memory_t user[MAX_ARGS] = {0}, prim[MAX_ARGS] = {0}, pad = NULL;
    dnnl_exec_arg_t args[MAX_ARGS + 1];
    bool ok = dnnl_stream_create(&st, g_engine, dnnl_stream_default_flags) == dnnl_success;
    for (int i = 0; ok && i < e->nargs; i++) {
        const conv_arg *a = &e->args[i];
        ok = dnnl_memory_create(&user[i], &a->user, g_engine, ptrs[i]) == dnnl_success;
        if (ok && a->reorder) ok = dnnl_memory_create(&prim[i], &a->prim, g_engine, buf + a->off) == dnnl_success;
        args[i] = (dnnl_exec_arg_t){a->arg, a->reorder ? prim[i] : user[i]};
    }
    int nargs = e->nargs;
    if (ok && e->pad_bytes) {
        ok = dnnl_memory_create(&pad, &e->pad_md, g_engine, buf) == dnnl_success;
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    }
    for (int i = 0; ok && i < e->nargs; i++)
        if (e->args[i].reorder && !e->args[i].out) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, user[i]}, {DNNL_ARG_TO, prim[i]}};
            ok = dnnl_primitive_execute(e->args[i].reorder, st, 2, ra) == dnnl_success;
        }
    ok = ok && dnnl_primitive_execute(e->prim, st, nargs, args) == dnnl_success;
    for (int i = 0; ok && i < e->nargs; i++)
        if (e->args[i].reorder && e->args[i].out) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, prim[i]}, {DNNL_ARG_TO, user[i]}};
            ok = dnnl_primitive_execute(e->args[i].reorder, st, 2, ra) == dnnl_success;
        }
    if (ok) ok = dnnl_stream_wait(st) == dnnl_success;
    for (int i = 0; i < e->nargs; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (prim[i]) dnnl_memory_destroy(prim[i]);
    }
    if (pad) dnnl_memory_destroy(pad);
    if (st) dnnl_stream_destroy(st);
    return ok ? PD_OK : pd__err(PD_ERR_INTERNAL, "oneDNN convolution failed to run");
}

pd_status pd__dnnl_conv(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                        const pd_tensor *B, pd_tensor *Y, bool *done) {
    *done = false;
    if (w->nsp < 1 || w->nsp > 3) return PD_OK;
    int nt = pd__nthreads(x);
    conv_key k;
    conv_key_make(&k, CONV_FWD, nt, w, group, X, W, B != NULL);
    const conv_entry *e = conv_lookup(&k);
    if (!e) return PD_OK;
    void *ptrs[MAX_ARGS] = {X->data, W->data};
    int i = 2;
    if (B) ptrs[i++] = B->data;
    ptrs[i] = Y->data;
    *done = true;
    return conv_exec(x, e, nt, ptrs);
}

pd_status pd__dnnl_conv_bwd(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                            const float *dY, float *dX, float *dW, bool *done) {
    *done = false;
    if (w->nsp < 1 || w->nsp > 3) return PD_OK;
    int nt = pd__nthreads(x);
    conv_key kd, kw;
    const conv_entry *ed = NULL, *ew = NULL;
    if (dX) {
        conv_key_make(&kd, CONV_BWD_DATA, nt, w, group, X, W, false);
        if (!(ed = conv_lookup(&kd))) return PD_OK;
    }
    if (dW) {
        conv_key_make(&kw, CONV_BWD_WEIGHTS, nt, w, group, X, W, false);
        if (!(ew = conv_lookup(&kw))) return PD_OK;
    }
    *done = true;
    if (ed) {
        void *ptrs[MAX_ARGS] = {(void *)dY, W->data, dX};
        PD_TRY(conv_exec(x, ed, nt, ptrs));
    }
    if (ew) {
        void *ptrs[MAX_ARGS] = {X->data, (void *)dY, dW};
        PD_TRY(conv_exec(x, ew, nt, ptrs));
    }
    return PD_OK;
}

/* One small float32 product, row-major, on one thread (oneDNN's sgemm: 15-45%
 * faster than OpenBLAS's on attention's 65x64x65 and 128x64x128 products
 * here). One thread whatever the caller's count, so the result does not
 * depend on it; callers split batches over threads themselves. */
bool pd__dnnl_sgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    static int state; /* 0 not read, 1 on, -1 off (PD_NO_ONEDNN); a benign race: every reader finds the same */
    if (state == 0) {
        const char *off = getenv("PD_NO_ONEDNN");
        state = off && *off && strcmp(off, "0") != 0 ? -1 : 1;
    }
    if (state < 0) return false;
    int was = pd__one_thread();
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    pd__one_thread_end(was);
    return st == dnnl_success;
}

#else /* no oneDNN: every convolution takes the im2col path */

bool pd__dnnl_sgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc;
    return false;
}

void pd__dnnl_release(void) {}
void pd__dnnl_stats(int64_t *ran, int64_t *declined) { *ran = *declined = 0; }

pd_status pd__dnnl_conv(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                        const pd_tensor *B, pd_tensor *Y, bool *done) {
    (void)x, (void)w, (void)group, (void)X, (void)W, (void)B, (void)Y;
    *done = false;
    return PD_OK;
}

pd_status pd__dnnl_conv_bwd(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                            const float *dY, float *dX, float *dW, bool *done) {
    (void)x, (void)w, (void)group, (void)X, (void)W, (void)dY, (void)dX, (void)dW;
    *done = false;
    return PD_OK;
}

#endif
