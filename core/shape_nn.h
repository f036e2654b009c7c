/* shape_nn.h - sliding-window geometry shared by the nn shape rules
 * (core/shape_nn.c) and the CPU kernels (runtime/cpu/nn.c).
 *
 * Conv, ConvTranspose, MaxPool and AveragePool read the same attributes
 * (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode,
 * output_padding, output_shape). One function turns them into a pd__win so
 * that the shape a rule promises and the windows a kernel walks cannot
 * disagree. Not installed; private to the library.
 */
#ifndef PD_SHAPE_NN_H
#define PD_SHAPE_NN_H

#include "pd_internal.h"

/* Window geometry over the spatial dims of an (N, C, D1..Dn) tensor.
 * Window o of dim i covers positions o*s[i] - pb[i] + j*d[i], j in [0, k[i]),
 * of the "image": the input for Conv and pools, the output for ConvTranspose
 * (whose col2im scatters input position o to those positions). */
typedef struct pd__win {
    int nsp;                  /* number of spatial dims */
    int64_t in[PD_MAX_DIMS];  /* spatial sizes of the input X */
    int64_t out[PD_MAX_DIMS]; /* spatial sizes of the output Y */
    int64_t k[PD_MAX_DIMS];   /* kernel */
    int64_t s[PD_MAX_DIMS];   /* strides */
    int64_t d[PD_MAX_DIMS];   /* dilations */
    int64_t pb[PD_MAX_DIMS];  /* pads at the start (ConvTranspose: may be negative) */
    int64_t pe[PD_MAX_DIMS];  /* pads at the end */
} pd__win;

typedef enum pd__win_kind {
    PD_WIN_CONV = 0, /* Conv: kernel from the weights, no ceil_mode */
    PD_WIN_POOL,     /* MaxPool / AveragePool: kernel_shape required, ceil_mode */
    PD_WIN_CONVT     /* ConvTranspose: output_padding, output_shape */
} pd__win_kind;

/* Fills *w from the node's attributes and the shape of X (rank ndim >= 3).
 * kshape: the kernel's spatial dims from the weights (NULL for pools).
 * On error sets the message (without the node prefix) and returns it. */
pd_status pd__win_make(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *xshape,
                       const int64_t *kshape, pd__win *w);

/* MaxUnpool(X, I, output_shape): the shape I's flat indices address
 * (`frame`: N, C, then (in - 1) * stride - pads + kernel per spatial dim,
 * as ONNX's reference) and the output's (`out`: the output_shape input when
 * given, each dim at least frame's, the frame at its start; else frame). in[2]
 * must then have data. */
pd_status pd__maxunpool_shapes(const pd__node *n, pd_tensor *const *in, int64_t *frame, int64_t *out);

/* Whether a BatchNormalization node computes batch statistics: training_mode
 * (opset 14+), more than one output (opsets 7-13), is_test=0 (before 7). */
int pd__bn_training(const pd__node *n);

/* Softmax / LogSoftmax view their input as (outer, len, inner) and normalize
 * over len: one axis from opset 13, the input coerced to 2-D at axis before. */
pd_status pd__softmax_split(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                            int64_t *inner);

/* MeanVarianceNormalization's axes (default [0, 2, 3]): reduced[d] for each
 * of the ndim dims; returns their count, or -1-i when entry i is out of
 * range or repeated. */
int pd__mvn_axes(const pd__node *n, int ndim, bool *reduced);

/* LpPool's p: an int from opset 2, a float in opset 1 (default 2). */
double pd__lppool_p(const pd__node *n);

/* Resize (opsets 10-19) and Upsample (7-9): separable nearest or N-linear
 * interpolation. The output shape and per-axis scales come from the scales
 * or sizes input (constants at load), the rest from the attributes. */
typedef enum pd__rsz_ctm {
    PD_RSZ_HALF_PIXEL = 0,
    PD_RSZ_PYTORCH_HALF_PIXEL,
    PD_RSZ_ALIGN_CORNERS,
    PD_RSZ_ASYMMETRIC,
    PD_RSZ_HALF_PIXEL_SYMMETRIC,
    PD_RSZ_TF_CROP_AND_RESIZE
} pd__rsz_ctm;
typedef enum pd__rsz_nearest {
    PD_RSZ_ROUND_PREFER_FLOOR = 0,
    PD_RSZ_ROUND_PREFER_CEIL,
    PD_RSZ_FLOOR,
    PD_RSZ_CEIL
} pd__rsz_nearest;
typedef struct pd__rsz {
    bool linear;              /* else nearest (or cubic) */
    bool cubic;               /* Keys' cubic convolution, coefficient cubic_a */
    bool exclude_outside;     /* cubic: taps outside the input weigh 0, the rest renormalised */
    double cubic_a;
    pd__rsz_ctm ctm;          /* coordinate_transformation_mode */
    pd__rsz_nearest nearest;  /* nearest_mode */
    int ndim;
    int64_t in[PD_MAX_DIMS], out[PD_MAX_DIMS];
    double scale[PD_MAX_DIMS]; /* output / input, per axis */
    double outf[PD_MAX_DIMS];  /* input * scale unrounded (with sizes: the size), as align_corners reads it */
    bool antialias;            /* linear, cubic: a downsampled axis widens its kernel by 1 / scale */
    int taps;                  /* input positions per output position: 4, or more with antialias */
    double roi[2 * PD_MAX_DIMS]; /* tf_crop_and_resize: starts, then ends, per axis (0 and 1 elsewhere) */
    double extrapolation;      /* tf_crop_and_resize: the value of outputs mapped outside the input */
    bool roi_f32;              /* roi is float32: its products rounded to float32, as ONNX's reference does */
} pd__rsz;

/* Fills *r from the node and X's shape; roi, scales, sizes: the inputs' data
 * (NULL or empty when not given; roi's data may be NULL at load, where only
 * the shape is wanted). Sets the message (without the node prefix) and
 * returns PD_ERR_UNSUPPORTED for the forms not implemented. */
pd_status pd__resize_plan(const pd__node *n, int ndim, const int64_t *xshape, const pd_tensor *roi,
                          const pd_tensor *scales, const pd_tensor *sizes, pd__rsz *r);

/* DeformConv (2-D): X (N, C, H, W), W (OC, C / group, KH, KW), offset
 * (N, OG * KH * KW * 2, OH, OW), optional B (OC) and mask (N, OG * KH * KW,
 * OH, OW); OG = offset_group. */
typedef struct pd__deform {
    int64_t N, C, H, W, OC, G, OG, KH, KW, OH, OW;
    int64_t sh, sw, dh, dw, pt, pl; /* strides, dilations, leading pads */
} pd__deform;

/* Fills *p from the node and the shapes (bshape, mshape NULL when B, mask
 * are absent). Sets the message (without the node prefix) on error. */
pd_status pd__deform_plan(const pd__node *n, int xr, const int64_t *x, int wr, const int64_t *w, int orr,
                          const int64_t *off, int br, const int64_t *b, int mr, const int64_t *m, pd__deform *p);

/* GridSample's taps per dim (1 nearest, 2 linear, 4 cubic; 0: unknown mode)
 * and padding (0 zeros, 1 border, 2 reflection; -1: unknown). */
int pd__grid_mode(const pd__node *n);
int pd__grid_padding(const pd__node *n);

/* Col2Im's block counts cnt, strides, leading pads and dilations per spatial
 * dim (r of them); false when the attributes do not fit the shapes. */
bool pd__col2im_plan(const pd__node *n, int r, const int64_t *img, const int64_t *blk, int64_t *cnt, int64_t *st,
                     int64_t *pb, int64_t *dil);

/* The input index of Resize's/Upsample's scales and sizes (-1: none). */
void pd__resize_inputs(const pd__node *n, int *scales, int *sizes);

/* Einsum that is a batched matrix product: every letter is
 * a batch dim (in A, B and the output), M (A and the output), N (B and the
 * output) or K (A and B, summed). A is read as (batch, M, K) through the
 * axis order pa, B as (batch, K, N) through pb; the product C (batch, M, N)
 * has its axis j at output axis po[j]. */
typedef struct pd__ein {
    int ra, rb, ro, nbt;                          /* ranks of A, B, the output, C */
    int64_t B, M, N, K;                           /* products of each role's sizes */
    int pa[PD_MAX_DIMS], pb[PD_MAX_DIMS], po[PD_MAX_DIMS];
    int64_t cshape[PD_MAX_DIMS], out[PD_MAX_DIMS]; /* C's dims, the output's */
    int64_t bshape[PD_MAX_DIMS]; /* one operand: B is ones of this shape (the letters summed) */
    /* a letter repeated in operand k (k 0: A, 1: B): the product reads its
     * diagonal, of rank dr[k] and shape dshape[k]; axis i of the operand is
     * axis dmap[k][i] of the diagonal */
    bool diag[2];
    int dr[2], dmap[2][PD_MAX_DIMS];
    int64_t dshape[2][PD_MAX_DIMS];
} pd__ein;

/* Parses the node's equation against the operands' shapes (nin 1: a
 * transpose or sum of A, planned as a product with B = ones of bshape over
 * the letters summed; rb, sb unused). An ellipsis stands for the operand's
 * axes not named (of one size in both operands: no broadcasting); a letter
 * repeated in an operand takes its diagonal (diag). Other forms (three
 * operands, with two operands a sum over one operand's axis) are
 * PD_ERR_UNSUPPORTED naming the equation. Sets the message without the node
 * prefix. */
pd_status pd__einsum_plan(const pd__node *n, int nin, int ra, const int64_t *sa, int rb, const int64_t *sb,
                          pd__ein *e);

/* The reduction attribute of the losses: 0 none, 1 sum, 2 mean, -1 unknown. */
int pd__loss_reduction(const pd__node *n);

/* RotaryEmbedding (opset 23): X seen as (B, S, H, D), from a 4-D
 * (B, H, S, D) or a 3-D (B, S, H*D) input; the first rd of each head's D
 * rotate by the cache rows (C >= rd/2 wide), in pairs (x[2i], x[2i+1])
 * when interleaved, else (x[i], x[i+rd/2]); the rest pass through. With
 * position_ids (B, S) the caches are (P, C) tables indexed by them, else
 * (B, S, C). */
typedef struct pd__rope {
    int64_t B, S, H, D, rd, C, P;
    bool four, interleaved, pos;
} pd__rope;

/* Fills *r from the node and the shapes of X, cos_cache and position_ids
 * (pn 0: absent). Sets the message without the node prefix. */
pd_status pd__rope_plan(const pd__node *n, int xn, const int64_t *xs, int cn, const int64_t *cs, int pn,
                        const int64_t *ps, pd__rope *r);

/* Attention (opset 23): Q (B, Hq, Sq, Dh) or (B, Sq, Hq*Dh), K and V
 * (B, Hk, Skv, Dh|Dv) or 3-D likewise; past_key/past_value (B, Hk, P, .)
 * are prepended to K and V (Tk = P + Skv keys); query head h reads kv head
 * h / (Hq / Hk). Scores scale * Q K^T, softcapped (cap * tanh(s / cap))
 * when softcap > 0, plus the mask (bool: false is -inf; float: added; keys
 * beyond its last dim are -inf) and, when causal, -inf where j > i + P;
 * softmax over the keys, times V. With nonpad_kv_seqlen, batch b's keys
 * from kvlen[b] on are -inf too and, without past, its causal diagonal is
 * offset by kvlen[b] - Sq (keys right-aligned). The mask broadcasts against
 * (B, Hq, Sq, .): mshape is its shape right-aligned to 4 dims (mn 0: none). */
typedef struct pd__attn {
    int64_t B, Hq, Hk, Sq, Skv, P, Tk, Dh, Dv;
    bool three, causal, past;
    const int64_t *kvlen; /* nonpad_kv_seqlen (opset 24, B): the kernel sets it; NULL: none */
    int mode; /* qk_matmul_output_mode: the scores (0, 1), plus the mask (2), the softmax (3) */
    double scale, softcap;
    int mn;
    int64_t mshape[4];
} pd__attn;

/* Fills *a from the node and the shapes of Q, K, V, attn_mask and
 * past_key (ndim 0: absent). Forms not implemented are PD_ERR_UNSUPPORTED
 * naming the attribute. Sets the message without the node prefix. */
pd_status pd__attn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                        const int64_t *vs, int mn, const int64_t *ms, int pn, const int64_t *ps, pd__attn *a);

/* LinearAttention (opset 27): query (B, T, Hq*Dk), key (B, T, Hk*Dk),
 * value (B, T, Hk*Dv); one (Dk, Dv) state per kv head, past_state
 * (B, Hk, Dk, Dv) or zeros. Token t: the state decays by exp(decay)
 * (gated; decay (B, T, Hk) per head or (B, T, Hk*Dk) per key row), the
 * delta rules write beta * (v - S^T k) instead of v (beta (B, T, Hk) or
 * (B, T, 1)), S += k v^T, and query head h reads kv head h / (Hq / Hk):
 * o = scale * S^T q. gw and bw: decay and beta values per token and kv head
 * group (gw 1 or Dk, bw Hk or 1; 0: absent). */
typedef struct pd__linattn {
    int64_t B, T, Hq, Hk, Dk, Dv;
    int64_t gw, bw;
    bool gated, delta;
    double scale;
} pd__linattn;

/* Fills *a from the node and the shapes of query, key, value, decay and
 * beta (ndim 0: absent). Sets the message without the node prefix. */
pd_status pd__linattn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                           const int64_t *vs, int dn, const int64_t *ds, int bn, const int64_t *bs, pd__linattn *a);

/* CausalConvWithState (opset 27): input (B, C, L), depthwise weight
 * (C, 1, K), bias (C), past_state (B, C, K-1) or zeros prepended; output
 * (B, C, L) the valid convolution of the K-1 + L positions (then SiLU
 * with activation silu/swish), present_state (B, C, K-1) their last K-1.
 * 1: silu, 0: none, -1: an activation not defined. */
int pd__ccws_silu(const pd__node *n);

/* RoiAlign's mode (0 avg, 1 max; -1 unknown) and the offset its
 * coordinate_transformation_mode subtracts (0.5 half_pixel, 0
 * output_half_pixel; -1 unknown). */
int pd__roialign_mode(const pd__node *n);
double pd__roialign_offset(const pd__node *n);

#endif
