/* loss.c - the training losses the session appends to a model's output; sums in double.
 *   cross_entropy  logits [..., V] float32, labels [...] int64 class ids:
 *                  L = mean over positions of -log softmax(logits)[label]
 *                  dlogits = (softmax - onehot(label)) / positions
 *   mse            pred and target of the same size, float32:
 *                  L = mean (pred - target)^2,  dpred = 2 (pred - target) / n
 * `rows` counts the leading-axis rows that take part (an evaluation batch
 * padded to the model's static batch passes fewer); the rest get zero
 * gradient and do not count. */
#include "loss.h"
#include "cpu/fastmath.h"

#include <math.h>
#include <string.h>

/* The largest of p[0..n) (n >= 1), eight lanes at a time; a NaN may or may
 * not win (the row's loss is NaN either way). */
static float max_f(const float *p, int64_t n) {
    float m[8];
    int64_t v = 0;
    for (int j = 0; j < 8; j++) m[j] = p[0];
    for (; v + 8 <= n; v += 8)
        for (int j = 0; j < 8; j++) m[j] = p[v + j] > m[j] ? p[v + j] : m[j];
    for (; v < n; v++) m[0] = p[v] > m[0] ? p[v] : m[0];
    for (int j = 1; j < 8; j++) m[0] = m[j] > m[0] ? m[j] : m[0];
    return m[0];
}

/* The sum of p[0..n) in double, eight running sums (one chain of adds was
 * the loss's slowest loop). */
static double sum_f(const float *p, int64_t n) {
    double s[8] = {0};
    int64_t v = 0;
    for (; v + 8 <= n; v += 8)
        for (int j = 0; j < 8; j++) s[j] += p[v + j];
    double t = 0;
    for (; v < n; v++) t += p[v];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

pd_status pd__loss_cross_entropy(const pd_tensor *logits, const pd_tensor *labels, int64_t rows, float *dlogits,
                                 double *loss, int64_t *correct, int64_t *count) {
    if (logits->dtype != PD_FLOAT || logits->ndim < 1)
        return pd__err(PD_ERR_SHAPE, "cross_entropy needs float32 logits with a class axis, the output is %s of rank %d",
                       pd_dtype_name(logits->dtype), logits->ndim);
    if (labels->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "cross_entropy needs int64 class labels");
    int64_t V = logits->shape[logits->ndim - 1], total = pd_tensor_numel(logits) / (V ? V : 1);
    bool fits = labels->ndim == logits->ndim - 1;
    for (int i = 0; fits && i < labels->ndim; i++) fits = labels->shape[i] == logits->shape[i];
    if (!fits || V < 1) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, logits->ndim, logits->shape);
        pd__format_shape(b, sizeof b, labels->ndim, labels->shape);
        return pd__err(PD_ERR_SHAPE,
                       "cross_entropy: labels of shape %s do not fit the output %s (labels must have its shape "
                       "without the last, class axis)",
                       b, a);
    }
    int64_t lead = logits->ndim > 1 ? logits->shape[0] : 1;
    int64_t per_row = lead ? total / lead : 0;
    int64_t n = (rows < lead ? rows : lead) * per_row;
    const float *z = logits->data;
    const int64_t *y = labels->data;
    for (int64_t p = 0; p < n; p++) {
        if (y[p] < 0 || y[p] >= V)
            return pd__err(PD_ERR_INVALID, "label %lld at position %lld is out of range [0, %lld)", (long long)y[p],
                           (long long)p, (long long)V);
    }
    /* positions over the threads, each one's loss kept and summed after in
     * order, so the total does not depend on the thread count */
    double *lp = (double *)PD_MALLOC(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!lp) return pd__err(PD_ERR_NOMEM, "cross_entropy: out of memory for %lld positions", (long long)n);
    int64_t ok = 0;
    /* the calling thread's OpenMP count, as runtime/optim.c's loops */
#pragma omp parallel for schedule(static) reduction(+ : ok) if (n * V > 65536)
    for (int64_t p = 0; p < n; p++) {
        const float *zp = z + p * V;
        float mx = max_f(zp, V);
        int64_t arg = 0;
        while (arg < V && !(zp[arg] == mx)) arg++; /* the first maximum (none: a NaN row) */
        /* e^(z - max) once, in float (vectorized), summed in double; the
         * gradient is e / sum / n */
        double se;
        if (dlogits) {
            float *dp = dlogits + p * V;
            for (int64_t v = 0; v < V; v++) dp[v] = pd__expf(zp[v] - mx);
            se = sum_f(dp, V);
            float scale = (float)(1.0 / (se * (double)n));
            for (int64_t v = 0; v < V; v++) dp[v] *= scale;
            dp[y[p]] -= (float)(1.0 / (double)n);
        } else {
            se = 0;
            for (int64_t v = 0; v < V; v++) se += pd__expf(zp[v] - mx);
        }
        lp[p] = log(se) + mx - zp[y[p]];
        ok += arg == y[p];
    }
    double sum = 0;
    for (int64_t p = 0; p < n; p++) sum += lp[p];
    PD_FREE(lp);
    if (dlogits && n < total) memset(dlogits + n * V, 0, sizeof(float) * (size_t)((total - n) * V));
    *loss = n ? sum / (double)n : 0;
    if (correct) *correct = ok;
    if (count) *count = n;
    return PD_OK;
}

pd_status pd__loss_mse(const pd_tensor *pred, const pd_tensor *target, int64_t rows, float *dpred, double *loss,
                       int64_t *count) {
    if (pred->dtype != PD_FLOAT || target->dtype != PD_FLOAT)
        return pd__err(PD_ERR_SHAPE, "mse needs float32 outputs and targets (got %s and %s)", pd_dtype_name(pred->dtype),
                       pd_dtype_name(target->dtype));
    int64_t total = pd_tensor_numel(pred);
    if (pd_tensor_numel(target) != total || (pred->ndim > 0 && target->ndim > 0 && pred->shape[0] != target->shape[0])) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, pred->ndim, pred->shape);
        pd__format_shape(b, sizeof b, target->ndim, target->shape);
        return pd__err(PD_ERR_SHAPE, "mse: targets of shape %s do not fit the output %s", b, a);
    }
    int64_t lead = pred->ndim > 0 ? pred->shape[0] : 1;
    int64_t per_row = lead ? total / lead : 0, n = (rows < lead ? rows : lead) * per_row;
    const float *p = pred->data, *t = target->data;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)p[i] - t[i];
        sum += d * d;
        if (dpred) dpred[i] = (float)(2.0 * d / (double)n);
    }
    if (dpred && n < total) memset(dpred + n, 0, sizeof(float) * (size_t)(total - n));
    *loss = n ? sum / (double)n : 0;
    if (count) *count = n;
    return PD_OK;
}
