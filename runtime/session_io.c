/* session_io.c - what a session is fed: graph inputs (checked against the
 * model's dtype and shape) and labels, written into the host slabs and
 * handed to the device (pd__sdev_input, pd__sdev_labels). */
#include "session_impl.h"

#include <string.h>

pd_status pd_session_set_input(pd_session *s, const char *name, const pd_tensor *t) {
    if (!s || !name || !t || !t->data)
        return pd__err(PD_ERR_INVALID, "pd_session_set_input: %s is NULL",
                       !s ? "session" : !name ? "name" : !t ? "tensor" : "the tensor's data");
    const pd_graph *g = s->g;
    int k = pd__graph_find(g, name);
    if (k < 0 || g->tensors[k].kind != PD_T_INPUT)
        return pd__err(PD_ERR_INVALID, "%s: the model has no input named '%s'", g->path, name);
    const pd__tensor *x = &g->tensors[k];
    char want[256], got[256];
    pd__format_shape(want, sizeof want, x->ndim, x->shape);
    pd__format_shape(got, sizeof got, t->ndim, t->shape);
    bool same = t->ndim == x->ndim && t->dtype == x->dtype;
    for (int i = 0; same && i < x->ndim; i++) same = t->shape[i] == x->shape[i];
    if (!same)
        return pd__err(PD_ERR_SHAPE, "%s: input '%s' must be %s%s, got %s%s", g->path, name, pd_dtype_name(x->dtype),
                       want, pd_dtype_name(t->dtype), got);
    memcpy(s->views[k].data, t->data, (size_t)x->numel * pd_dtype_size(x->dtype));
    PD_TRY(pd__sdev_input(s, k)); /* to the device (nothing on the CPU) */
    s->fed[k] = true;
    return PD_OK;
}

pd_status pd_session_set_labels(pd_session *s, const pd_tensor *labels) {
    if (!s || !labels || !labels->data)
        return pd__err(PD_ERR_INVALID, "pd_session_set_labels: %s is NULL",
                       !s ? "session" : !labels ? "labels" : "the labels' data");
    if (labels->ndim < 0 || labels->ndim > PD_MAX_DIMS || pd_tensor_numel(labels) < 0)
        return pd__err(PD_ERR_INVALID, "pd_session_set_labels: labels: bad shape (ndim %d)", labels->ndim);
    if (s->labels_input >= 0) {
        PD_TRY(pd_session_set_input(s, s->g->tensors[s->labels_input].name, labels));
        s->labels_fed = true;
        return PD_OK;
    }
    size_t bytes = (size_t)pd_tensor_numel(labels) * pd_dtype_size(labels->dtype);
    bool same = s->labels.data && labels->dtype == s->labels.dtype && labels->ndim == s->labels.ndim;
    for (int i = 0; same && i < labels->ndim; i++) same = labels->shape[i] == s->labels.shape[i];
    if (!same) {
        void *d = PD_MALLOC(bytes ? bytes : 1);
        if (!d) return pd__err(PD_ERR_NOMEM, "out of memory for the labels");
        PD_FREE(s->labels.data);
        s->labels = *labels;
        s->labels.data = d;
    }
    memcpy(s->labels.data, labels->data, bytes);
    PD_TRY(pd__sdev_labels(s));
    s->labels_fed = true;
    return PD_OK;
}

pd_status pd__check_fed(const pd_session *s) {
    const pd_graph *g = s->g;
    for (int i = 0; i < g->ninputs; i++)
        if (!s->fed[g->inputs[i]])
            return pd__err(PD_ERR_INVALID, "%s: input '%s' has not been set", g->path, g->tensors[g->inputs[i]].name);
    if (!s->labels_fed) return pd__err(PD_ERR_INVALID, "%s: no labels have been set", g->path);
    return PD_OK;
}

int64_t pd_session_batch(const pd_session *s) {
    if (!s) return 0;
    const pd__tensor *p = &s->g->tensors[s->pred];
    return p->ndim > 0 ? p->shape[0] : 1;
}
