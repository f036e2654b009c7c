/* shape_elem.h - what the element-wise shape rules (core/shape_elem.c) and
 * their CPU kernels (runtime/cpu/elementwise.c) must agree on: which dtypes
 * an op computes in, the shape input B takes under the old (opset < 7)
 * broadcast attribute, and which axes a Reduce* op reduces.
 * Not installed; private to the library.
 */
#ifndef PD_SHAPE_ELEM_H
#define PD_SHAPE_ELEM_H

#include "pd_internal.h"

/* Dtype classes, as bits so that a rule can say which ones it accepts. */
#define PD_EK_FLOAT 1u /* float, double, float16, bfloat16 */
#define PD_EK_SINT 2u  /* int8, int16, int32, int64 */
#define PD_EK_UINT 4u  /* uint8, uint16, uint32, uint64 */
#define PD_EK_BOOL 8u
#define PD_EK_INT (PD_EK_SINT | PD_EK_UINT)
#define PD_EK_NUM (PD_EK_FLOAT | PD_EK_INT)
#define PD_EK_ANY (PD_EK_NUM | PD_EK_BOOL)

/* The class of a dtype, 0 for the ones no kernel handles (string, float8, int4...). */
static inline unsigned pd__ekind(pd_dtype t) {
    switch (t) {
    case PD_FLOAT: case PD_DOUBLE: case PD_FLOAT16: case PD_BFLOAT16: return PD_EK_FLOAT;
    case PD_INT8: case PD_INT16: case PD_INT32: case PD_INT64: return PD_EK_SINT;
    case PD_UINT8: case PD_UINT16: case PD_UINT32: case PD_UINT64: return PD_EK_UINT;
    case PD_BOOL: return PD_EK_BOOL;
    default: return 0;
    }
}

/* Old-style broadcasting (opset < 7, attribute broadcast=1): B's dims line
 * up with A's starting at `axis` (default: B's dims are A's last ones).
 * Rewrites B's shape into the equivalent rank-na numpy shape. False when B
 * does not fit inside A at that axis. Later opsets: B's shape unchanged. */
static inline bool pd__legacy_bshape(const pd__node *n, int na, int *nb, int64_t *bshape) {
    if (n->opset >= 7 || pd__attr_i(n, "broadcast", 0) == 0 || !pd__attr_get(n, "axis")) return true;
    int64_t axis = pd__attr_i(n, "axis", 0);
    if (axis < 0) axis += na;
    if (axis < 0 || axis + *nb > na) return false;
    int64_t s[PD_MAX_DIMS];
    for (int d = 0; d < na; d++) s[d] = (d >= axis && d < axis + *nb) ? bshape[d - axis] : 1;
    for (int d = 0; d < na; d++) bshape[d] = s[d];
    *nb = na;
    return true;
}

/* Whether a Reduce* node takes its axes from input 1 (newer opsets: 13 for
 * ReduceSum, 18 for the others) rather than the `axes` attribute. */
static inline bool pd__reduce_axes_input(const pd__node *n) {
    return n->opset >= (n->op == PD_OP_REDUCE_SUM ? 13 : 18);
}

/* The axes a Reduce* op of a rank-`ndim` input reduces:
 * mask[d] = 1 for each. `axes` is a view of input 1 (NULL when absent; its
 * data may be NULL only when it has no elements), read in the newer opsets.
 * *noop is set when nothing is reduced (empty axes, noop_with_empty_axes).
 * Returns PD_OK, PD_ERR_UNSUPPORTED (axes not known), or PD_ERR_SHAPE (an
 * axis out of range or repeated). Sets no message: the caller does. */
static inline pd_status pd__reduce_mask(const pd__node *n, int ndim, const pd_tensor *axes, bool *mask,
                                        bool *noop) {
    const int64_t *av = NULL;
    int na = 0;
    bool from_input = pd__reduce_axes_input(n);
    if (from_input && axes) {
        int64_t cnt = pd_tensor_numel(axes);
        if (cnt > 0 && !axes->data) return PD_ERR_UNSUPPORTED;
        if (axes->dtype != PD_INT64 && axes->dtype != PD_INT32) return PD_ERR_SHAPE;
        if (cnt > 64) return PD_ERR_SHAPE;
        na = (int)cnt;
    } else if (!from_input) {
        na = pd__attr_ints(n, "axes", &av);
    }
    *noop = false;
    for (int d = 0; d < ndim; d++) mask[d] = na == 0;
    if (na == 0) {
        if (from_input && pd__attr_i(n, "noop_with_empty_axes", 0)) {
            *noop = true;
            for (int d = 0; d < ndim; d++) mask[d] = false;
        }
        return PD_OK;
    }
    for (int k = 0; k < na; k++) {
        int64_t a = av ? av[k] : pd__get_i(axes->dtype, axes->data, k);
        if (a < 0) a += ndim;
        if (a < 0 || a >= ndim || mask[a]) return PD_ERR_SHAPE;
        mask[a] = true;
    }
    return PD_OK;
}

#endif
