/* shape_tensor.h - parameters of the tensor ops (Transpose, Split, Slice, Pad,
 * Shape, Constant, ConstantOfShape, Range, CumSum, CumProd, Trilu, Tile,
 * OneHot, GatherND, the scatters, the arg/top-k selections, DepthToSpace,
 * SpaceToDepth, EyeLike, Compress, ReverseSequence, NonZero), resolved from
 * a node's attributes
 * and constant inputs.
 *
 * How it works: docs/INTERNALS.md, "core/shape_tensor.h".
 */
#ifndef PD_SHAPE_TENSOR_H
#define PD_SHAPE_TENSOR_H

#include "pd_internal.h"

/* axis in [-rank, rank) -> [0, rank); false when out of range. */
bool pd__norm_axis(int64_t axis, int rank, int *out);

/* Transpose: the permutation (attribute `perm`, default reversed), validated. */
pd_status pd__transpose_perm(const pd__node *n, int rank, int *perm);

/* Split: the axis and the size of each of the n->nout parts along it
 * (`sizes` has room for n->nout values). */
pd_status pd__split_sizes(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *sizes);

/* Slice: for every axis of the input (rank = in[0]->ndim) the first element,
 * the step and the count of elements taken; unsliced axes get 0, 1, dim. */
typedef struct pd__slice_params {
    int64_t start[PD_MAX_DIMS];
    int64_t step[PD_MAX_DIMS];
    int64_t count[PD_MAX_DIMS];
} pd__slice_params;
pd_status pd__slice_resolve(const pd__node *n, pd_tensor *const *in, pd__slice_params *p);

/* Pad: mode and the pads before/after every axis (negative pads crop).
 * The constant value is not resolved here (the kernel reads it). */
typedef enum pd__pad_mode { PD_PAD_CONSTANT, PD_PAD_REFLECT, PD_PAD_EDGE, PD_PAD_WRAP } pd__pad_mode;
typedef struct pd__pad_params {
    pd__pad_mode mode;
    int64_t begin[PD_MAX_DIMS];
    int64_t end[PD_MAX_DIMS];
} pd__pad_params;
pd_status pd__pad_resolve(const pd__node *n, pd_tensor *const *in, pd__pad_params *p);

/* Shape (opset 15 start/end): the dims [*start, *end) of a rank-`rank` input. */
void pd__shape_span(const pd__node *n, int rank, int *start, int *end);

/* Constant: a view (dtype, shape, data) of the node's value; the data points
 * into the attribute (NULL when the value has no elements). */
pd_status pd__constant_value(const pd__node *n, pd_tensor *out);

/* ConstantOfShape: a view of the one-element fill value (float 0 when the
 * `value` attribute is absent; `zero` provides its storage). */
pd_status pd__constant_of_shape_value(const pd__node *n, pd_tensor *out, float *zero);

/* Range: the number of elements of Range(start, limit, delta) (scalars). */
pd_status pd__range_count(const pd_tensor *start, const pd_tensor *limit, const pd_tensor *delta, int64_t *count);

/* ---- mask-building, index, selection and layout ops ---------------------------------- */

/* CumSum: the axis (input 1, a constant or runtime scalar with data). */
pd_status pd__cumsum_axis(const pd_tensor *x, const pd_tensor *axis, int *out);

/* EyeLike: the output dtype (attribute dtype, else the input's `in`). */
pd_status pd__eyelike_dtype(const pd__node *n, pd_dtype in, pd_dtype *out);

/* Compress: the axis (-1 when absent: the input flattened), how many of its
 * positions the condition covers (*len) and keeps (*kept). The condition
 * (input 1) must have data; a true past the axis is an error. */
pd_status pd__compress_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *len, int64_t *kept);

/* ReverseSequence: the time and batch axes (0 and 1, either way); the
 * sequence lengths (input 1) are checked against the time axis when known. */
pd_status pd__reverse_sequence_params(const pd__node *n, pd_tensor *const *in, int *time_axis, int *batch_axis);

/* NonZero: the count of non-zero elements of x (which has data). */
int64_t pd__count_nonzero(const pd_tensor *x);

/* Trilu: k (optional input 1, default 0). */
pd_status pd__trilu_k(const pd__node *n, pd_tensor *const *in, int64_t *k);

/* Tile: the repeats (input 1, one per axis of in[0], each >= 0; Tile-1:
 * inputs tiles and axis, the one axis repeated). */
pd_status pd__tile_repeats(const pd__node *n, pd_tensor *const *in, int64_t *rep);

/* OneHot: the axis of the output (rank in[0]->ndim + 1) and the depth. */
pd_status pd__onehot_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *depth);

/* ArgMax, ArgMin, Hardmax, TopK: the axis of a rank-`rank` input
 * (attribute `axis`, default `def`). */
pd_status pd__reduce_axis(const pd__node *n, int rank, int64_t def, int *axis);

/* TopK: the axis and k (attribute before opset 10, constant input after). */
pd_status pd__topk_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *k);

/* GatherND: batch_dims and the length m of an index tuple (indices' last dim). */
pd_status pd__gathernd_params(const pd__node *n, const pd_tensor *data, const pd_tensor *ind, int *batch, int *m);

/* ScatterElements, ScatterND: the reduction attribute. */
typedef enum pd__scatter_red { PD_RED_NONE, PD_RED_ADD, PD_RED_MUL, PD_RED_MAX, PD_RED_MIN } pd__scatter_red;
pd_status pd__scatter_reduction(const pd__node *n, pd__scatter_red *r);

/* DepthToSpace, SpaceToDepth: the six-dim box the output walks, in output
 * order, and the input stride (in elements) of each of its dims; the output
 * shape is written to oshape (rank 4). */
pd_status pd__space_depth_walk(const pd__node *n, const pd_tensor *x, bool to_space, int64_t *box, int64_t *istride,
                               int64_t *oshape);

/* DFT over one axis of x (rank r, the last dim 1 real or 2 complex): outer
 * and inner are the products of the dims before and after the axis (not the
 * last); lin the input's length on the axis, n the transform's length, m the
 * output's; cin and cout the last dims. inverse with onesided reads a half
 * spectrum and writes a real signal. len and axis (the inputs, NULL when
 * absent) must have data. */
typedef struct pd__dft {
    int axis, cin, cout;
    int64_t outer, inner, lin, n, m;
    bool inverse, onesided;
} pd__dft;
pd_status pd__dft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *len, const pd_tensor *axis, pd__dft *p);

/* STFT of signal (batch, length, 1 or 2): frames of frame_len every step, each
 * bins long in the output (batch, frames, bins, 2). */
typedef struct pd__stft {
    int64_t batch, length, step, frame_len, frames, bins;
    int c;
} pd__stft;
pd_status pd__stft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *step, const pd_tensor *window,
                        const pd_tensor *frame_len, pd__stft *p);

/* NonMaxSuppression's selected (batch, class, box) triples, written to sel
 * (3 per selection; NULL: only count them) in the spec's order, their count
 * to *count; in holds the nin inputs (NULL when absent), all with data. */
pd_status pd__nms_select(const pd__node *n, const pd_tensor *const *in, int nin, int64_t *sel, int64_t *count);

/* Unique over x (data required): the number of unique values (or slices
 * along the axis attribute) to *count, the axis to *axis (-1: flattened);
 * with out (Y, indices, inverse_indices, counts; NULL when absent) writes
 * them too. */
pd_status pd__unique_run(const pd__node *n, const pd_tensor *x, int *axis, int64_t *count, pd_tensor *const *out,
                         int nout);

/* TfIdfVectorizer: checks the attributes (integer pool only: pool_strings
 * and string inputs are not supported) and gives the output's width,
 * max(ngram_indexes) + 1. Sets the message without the node prefix. */
pd_status pd__tfidf_width(const pd__node *n, int64_t *width);

#endif
