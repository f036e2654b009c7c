/* loss.h - losses the session appends to a model's output (runtime/loss.c). */
#ifndef PD_LOSS_H
#define PD_LOSS_H

#include "../core/pd_internal.h"

/* dlogits / dpred may be NULL (evaluation); they are overwritten, not added to. */
pd_status pd__loss_cross_entropy(const pd_tensor *logits, const pd_tensor *labels, int64_t rows, float *dlogits,
                                 double *loss, int64_t *correct, int64_t *count);
pd_status pd__loss_mse(const pd_tensor *pred, const pd_tensor *target, int64_t rows, float *dpred, double *loss,
                       int64_t *count);

#endif
