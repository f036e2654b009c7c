/* optim.h - optimizer updates and learning-rate schedule (runtime/optim.c). */
#ifndef PD_OPTIM_H
#define PD_OPTIM_H

#include "../core/pd_internal.h"

const char *pd__optim_name(pd_optimizer_kind k);
/* How many state slabs (each the size of the parameters) the optimizer keeps. */
int pd__optim_state_slabs(pd_optimizer_kind k);
/* The learning rate of the step-th update (1-based). */
double pd__lr_at(const pd_train_options *o, int64_t step);
/* The sum of g^2 in double, in fixed blocks (the same bits at every thread
 * count): what the devices' sumsq returns (runtime/device.h); the L2 norm
 * is its square root. */
double pd__sq_sum(const float *g, int64_t n);
#define PD__NORM_BLOCK 16384 /* its blocks' size (the CUDA module's too) */
/* pd__sq_sum of n floats that come in pieces (a pipeline chunk's
 * parameters, in packed order): begin with the total n, feed the pieces in
 * order, end gives the sum, bitwise pd__sq_sum of their concatenation. */
typedef struct pd__sq_stream {
    double a[8], s;
    int64_t n, i; /* the total, the elements fed so far */
} pd__sq_stream;
void pd__sq_begin(pd__sq_stream *q, int64_t n);
void pd__sq_feed(pd__sq_stream *q, const float *g, int64_t n);
double pd__sq_end(const pd__sq_stream *q);
/* One update of n parameters; t is the 1-based update count; s0/s1 the state slabs. */
void pd__optim_step(const pd_train_options *o, int64_t t, double lr, float *w, float *g, float *s0, float *s1,
                    int64_t n);

#endif
