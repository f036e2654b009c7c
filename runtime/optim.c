/* optim.c - optimizers with PyTorch's conventions, over one flat slab of
 * parameters and one of gradients (the session's layout), and the learning-
 * rate schedule. Clipping is torch.nn.utils.clip_grad_norm_'s.
 *
 *   sgd       w -= lr * (g + wd*w)
 *   momentum  v = mu*v + (g + wd*w);  w -= lr*v              (torch.optim.SGD, dampening 0)
 *   nesterov  v = mu*v + g';  w -= lr*(g' + mu*v)            (g' = g + wd*w)
 *   adam      m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
 *             w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)   (torch.optim.Adam, L2 in g')
 *   adamw     w *= 1 - lr*wd, then adam without L2           (torch.optim.AdamW)
 * The scalars are rounded as PyTorch rounds them: docs/INTERNALS.md, "runtime/optim.c". */
#include "optim.h"

#include <math.h>
#include <string.h>

const char *pd__optim_name(pd_optimizer_kind k) {
    switch (k) {
    case PD_OPT_SGD: return "sgd";
    case PD_OPT_MOMENTUM: return "momentum";
    case PD_OPT_NESTEROV: return "nesterov";
    case PD_OPT_ADAM: return "adam";
    case PD_OPT_ADAMW: return "adamw";
    }
    return "?";
}

int pd__optim_state_slabs(pd_optimizer_kind k) {
    switch (k) {
    case PD_OPT_SGD: return 0;
    case PD_OPT_MOMENTUM: case PD_OPT_NESTEROV: return 1;
    case PD_OPT_ADAM: case PD_OPT_ADAMW: return 2;
    }
    return 0;
}

double pd__lr_at(const pd_train_options *o, int64_t step) {
    /* step is 1-based: the lr used by the step-th update */
    double lr = o->lr;
    if (o->warmup_steps > 0 && step <= o->warmup_steps) return lr * (double)step / (double)o->warmup_steps;
    if (o->cosine_steps > 0) {
        int64_t s = step - o->warmup_steps, span = o->cosine_steps - o->warmup_steps;
        if (span <= 0) return o->min_lr;
        double p = (double)(s < span ? s : span) / (double)span;
        return o->min_lr + 0.5 * (lr - o->min_lr) * (1.0 + cos(M_PI * p));
    }
    return lr;
}

/* Summed in double over fixed blocks, each with eight running sums, and the
 * blocks' sums added in order: the same value at every thread count, and
 * the order every device's sum of squares follows (runtime/device.h). */
static double pd__sq_lanes(const double *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
static double pd__sq_block(const float *g, int64_t n, int64_t b) {
    g += b * PD__NORM_BLOCK;
    int64_t m = n - b * PD__NORM_BLOCK < PD__NORM_BLOCK ? n - b * PD__NORM_BLOCK : PD__NORM_BLOCK;
    double a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (int k = 0; k < 8; k++) a[k] += (double)g[i + k] * g[i + k];
    for (; i < m; i++) a[0] += (double)g[i] * g[i];
    return pd__sq_lanes(a);
}

double pd__sq_sum(const float *g, int64_t n) {
    int64_t nb = (n + PD__NORM_BLOCK - 1) / PD__NORM_BLOCK;
    double stack[64], *part = nb <= 64 ? stack : (double *)PD_MALLOC(sizeof(double) * (size_t)nb), s = 0;
    if (!part) { /* no room for the blocks' sums: the same sum on this thread */
        for (int64_t b = 0; b < nb; b++) s += pd__sq_block(g, n, b);
        return s;
    }
#pragma omp parallel for schedule(static) if (nb > 4)
    for (int64_t b = 0; b < nb; b++)
        part[b] = pd__sq_block(g, n, b);
    for (int64_t b = 0; b < nb; b++) s += part[b];
    if (part != stack) PD_FREE(part);
    return s;
}

/* pd__sq_block's lanes over pieces: element i of a block of m goes to lane
 * i % 8, but to lane 0 past the block's last whole group of eight. */
void pd__sq_begin(pd__sq_stream *q, int64_t n) {
    memset(q, 0, sizeof *q);
    q->n = n;
}

void pd__sq_feed(pd__sq_stream *q, const float *g, int64_t n) {
    while (n > 0 && q->i < q->n) {
        int64_t i = q->i % PD__NORM_BLOCK, start = q->i - i;
        int64_t m = q->n - start < PD__NORM_BLOCK ? q->n - start : PD__NORM_BLOCK, whole = m / 8 * 8;
        int64_t k = n < m - i ? n : m - i; /* this piece's elements in this block */
        for (int64_t e = 0; e < k; e++, i++) q->a[i < whole ? (i & 7) : 0] += (double)g[e] * g[e];
        g += k, n -= k, q->i += k;
        if (i == m) { /* the block is complete: its sum, in order */
            q->s += pd__sq_lanes(q->a);
            memset(q->a, 0, sizeof q->a);
        }
    }
}

double pd__sq_end(const pd__sq_stream *q) { return q->s; }

/* Element by element, so the threads (the calling thread's OpenMP count:
 * pd__threads_use) change nothing but the time. */
#define PD__OPTIM_FOR PD__PRAGMA(omp parallel for simd schedule(static) if (n > 65536))
#define PD__PRAGMA(x) _Pragma(#x)

void pd__optim_step(const pd_train_options *o, int64_t t, double lr, float *w, float *g, float *s0, float *s1,
                    int64_t n) {
    const float wd = (float)o->weight_decay, mu = (float)o->momentum, flr = (float)lr;
    switch (o->optimizer) {
    case PD_OPT_SGD:
        PD__OPTIM_FOR
        for (int64_t i = 0; i < n; i++) w[i] -= flr * (g[i] + wd * w[i]);
        break;
    case PD_OPT_MOMENTUM:
        PD__OPTIM_FOR
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s0[i] = t == 1 ? gi : mu * s0[i] + gi;
            w[i] -= flr * s0[i];
        }
        break;
    case PD_OPT_NESTEROV:
        PD__OPTIM_FOR
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s0[i] = t == 1 ? gi : mu * s0[i] + gi;
            w[i] -= flr * (gi + mu * s0[i]);
        }
        break;
    case PD_OPT_ADAM:
    case PD_OPT_ADAMW: {
        const float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
        const float c1 = (float)(1.0 - o->beta1), c2 = (float)(1.0 - o->beta2);
        const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
        const float step = (float)(lr / bc1), sbc2 = (float)sqrt(bc2), decay = (float)(1.0 - lr * o->weight_decay);
        const bool decoupled = o->optimizer == PD_OPT_ADAMW;
        PD__OPTIM_FOR
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i];
            if (decoupled)
                w[i] *= decay;
            else
                gi += wd * w[i];
            s0[i] = b1 * s0[i] + c1 * gi;
            s1[i] = b2 * s1[i] + c2 * gi * gi;
            w[i] -= step * s0[i] / (sqrtf(s1[i]) / sbc2 + eps);
        }
        break;
    }
    }
}
