/* optim.h - optimizer updates and learning-rate schedule (runtime/optim.c). */
#ifndef PD_OPTIM_H
#define PD_OPTIM_H

#include "../core/pd_internal.h"

const char *pd__optim_name(pd_optimizer_kind k);
/* How many state slabs (each the size of the parameters) the optimizer keeps. */
int pd__optim_state_slabs(pd_optimizer_kind k);
/* The learning rate of the step-th update (1-based). */
double pd__lr_at(const pd_train_options *o, int64_t step);
double pd__grad_norm(const float *g, int64_t n);
/* One update of n parameters; t is the 1-based update count; s0/s1 the state slabs. */
void pd__optim_step(const pd_train_options *o, int64_t t, double lr, float *w, float *g, float *s0, float *s1,
                    int64_t n);

#endif
