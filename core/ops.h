/* ops.h - the one list of operators.
 *
 * How it works: docs/INTERNALS.md, "core/ops.h".
 */
#ifndef PD_OPS_H
#define PD_OPS_H

#define PD_OPF_FOLD 1
#define PD_OPF_NN 2
#define PD_OPF_ELEM 4
#define PD_OPF_TENSOR 8
#define PD_OPF_FAMILY (PD_OPF_NN | PD_OPF_ELEM | PD_OPF_TENSOR | PD_OPF_RNN)
#define PD_OPF_BWD_WRITES 16
#define PD_OPF_HOST 32
#define PD_OPF_RNN 64
#define PD_GRAD_ALL 0xffffffffu

#define PD_OPS(X)                                                                                  \
    /* neural-network ops */                                                                       \
    X(GEMM, Gemm, PD_OPF_NN | PD_OPF_BWD_WRITES, 0x7, 0)                                           \
    X(MATMUL, MatMul, PD_OPF_NN | PD_OPF_BWD_WRITES, 0x3, 0)                                       \
    X(CONV, Conv, PD_OPF_NN, 0x7, 0)                                                               \
    X(CONV_TRANSPOSE, ConvTranspose, PD_OPF_NN | PD_OPF_HOST, 0x7, 0)                              \
    X(DEFORM_CONV, DeformConv, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1f, 0)                     \
    X(BATCH_NORM, BatchNormalization, PD_OPF_NN, 0x7, 0x18)                                        \
    X(LAYER_NORM, LayerNormalization, PD_OPF_NN, 0x7, 0)                                           \
    X(INSTANCE_NORM, InstanceNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)         \
    X(GROUP_NORM, GroupNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)               \
    X(RMS_NORM, RMSNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                   \
    X(LP_NORM, LpNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                     \
    X(MVN, MeanVarianceNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(MAX_POOL, MaxPool, PD_OPF_NN, 0x1, 0)                                                        \
    X(AVERAGE_POOL, AveragePool, PD_OPF_NN, 0x1, 0)                                                \
    X(GLOBAL_AVERAGE_POOL, GlobalAveragePool, PD_OPF_NN, 0x1, 0)                                   \
    X(LP_POOL, LpPool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                              \
    X(GLOBAL_MAX_POOL, GlobalMaxPool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(MAX_UNPOOL, MaxUnpool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(RESIZE, Resize, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(UPSAMPLE, Upsample, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(EINSUM, Einsum, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                               \
    X(DET, Det, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                     \
    X(LRN, LRN, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                                                   \
    X(SOFTMAX, Softmax, PD_OPF_NN, 0x1, 0)                                                         \
    X(LOG_SOFTMAX, LogSoftmax, PD_OPF_NN, 0x1, 0)                                                  \
    X(DROPOUT, Dropout, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                                           \
    /* random draws: never folded (each run draws), not differentiable */                         \
    X(BERNOULLI, Bernoulli, PD_OPF_NN | PD_OPF_HOST, 0, 0)                                         \
    X(RANDOM_UNIFORM_LIKE, RandomUniformLike, PD_OPF_NN | PD_OPF_HOST, 0, 0)                       \
    X(SOFTMAX_CE_LOSS, SoftmaxCrossEntropyLoss, PD_OPF_NN, 0x1, 0)                                 \
    X(NLL_LOSS, NegativeLogLikelihoodLoss, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                        \
    X(ROTARY_EMBEDDING, RotaryEmbedding, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)            \
    X(ATTENTION, Attention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)                         \
    X(LINEAR_ATTENTION, LinearAttention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3f, 0)           \
    X(CAUSAL_CONV_WITH_STATE, CausalConvWithState, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0xf, 0)  \
    /* domain ai.onnx.preview (onnx/load.c, node_op) */                                            \
    X(FLEX_ATTENTION, FlexAttention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)                \
    X(GRID_SAMPLE, GridSample, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                      \
    X(AFFINE_GRID, AffineGrid, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(COL2IM, Col2Im, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(CENTER_CROP_PAD, CenterCropPad, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(ROI_ALIGN, RoiAlign, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    /* quantized (integer) ops: no gradient */                                                     \
    X(MATMUL_INTEGER, MatMulInteger, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                  \
    X(QLINEAR_MATMUL, QLinearMatMul, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                  \
    X(CONV_INTEGER, ConvInteger, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(QLINEAR_CONV, QLinearConv, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    /* recurrent: inputs X, W, R, B, sequence_lens, initial_h (initial_c, P) */                    \
    X(LSTM, LSTM, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0xef, 0)                                 \
    X(GRU, GRU, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0x2f, 0)                                   \
    X(RNN, RNN, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0x2f, 0)                                   \
    /* element-wise */                                                                             \
    X(ADD, Add, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(SUB, Sub, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(MUL, Mul, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(DIV, Div, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(POW, Pow, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES | PD_OPF_HOST, 0x3, 0)               \
    X(SUM, Sum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(SQRT, Sqrt, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(EXP, Exp, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(LOG, Log, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(NEG, Neg, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(RECIPROCAL, Reciprocal, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(RELU, Relu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(LEAKY_RELU, LeakyRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                \
    X(SIGMOID, Sigmoid, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                     \
    X(TANH, Tanh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(GELU, Gelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(ERF, Erf, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(CLIP, Clip, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES | PD_OPF_HOST, 0x1, 0)             \
    X(EQUAL, Equal, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(WHERE, Where, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x6, 0)                               \
    X(CAST, Cast, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(IDENTITY, Identity, PD_OPF_ELEM | PD_OPF_FOLD, 0x1, 0)                                       \
    X(LESS, Less, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(LESS_OR_EQUAL, LessOrEqual, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                   \
    X(GREATER, Greater, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                             \
    X(GREATER_OR_EQUAL, GreaterOrEqual, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)             \
    X(AND, And, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(OR, Or, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                       \
    X(NOT, Not, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(XOR, Xor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(BITWISE_AND, BitwiseAnd, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BITWISE_OR, BitwiseOr, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                        \
    X(BITWISE_XOR, BitwiseXor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BITWISE_NOT, BitwiseNot, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BIT_SHIFT, BitShift, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(IS_NAN, IsNaN, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                \
    X(IS_INF, IsInf, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                \
    X(MAX, Max, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(MIN, Min, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(MEAN, Mean, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                         \
    X(MOD, Mod, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                                   \
    X(ABS, Abs, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(SIGN, Sign, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(FLOOR, Floor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(CEIL, Ceil, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(ROUND, Round, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(HARD_SIGMOID, HardSigmoid, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                  \
    X(HARD_SWISH, HardSwish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(SOFTPLUS, Softplus, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(SOFTSIGN, Softsign, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(ELU, Elu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(SELU, Selu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(CELU, Celu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(MISH, Mish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(SWISH, Swish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(THRESHOLDED_RELU, ThresholdedRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)          \
    X(PRELU, PRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                               \
    X(SHRINK, Shrink, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(SIN, Sin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(COS, Cos, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(TAN, Tan, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(ASIN, Asin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ACOS, Acos, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ATAN, Atan, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(SINH, Sinh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(COSH, Cosh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ASINH, Asinh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ACOSH, Acosh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ATANH, Atanh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(CAST_LIKE, CastLike, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(BIT_CAST, BitCast, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(QUANTIZE_LINEAR, QuantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)              \
    X(DEQUANTIZE_LINEAR, DequantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)          \
    X(DYNAMIC_QUANTIZE_LINEAR, DynamicQuantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)\
    /* reductions */                                                                               \
    X(REDUCE_MEAN, ReduceMean, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                    \
    X(REDUCE_SUM, ReduceSum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_MAX, ReduceMax, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_MIN, ReduceMin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_PROD, ReduceProd, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                    \
    X(REDUCE_L1, ReduceL1, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(REDUCE_L2, ReduceL2, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(REDUCE_SUM_SQUARE, ReduceSumSquare, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)         \
    X(REDUCE_LOG_SUM, ReduceLogSum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(REDUCE_LOG_SUM_EXP, ReduceLogSumExp, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)        \
    /* optimizer steps as graph nodes: domain ai.onnx.preview.training (onnx/load.c, node_op) */   \
    X(ADAGRAD, Adagrad, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                             \
    X(ADAM, Adam, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(MOMENTUM, Momentum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                           \
    /* domain ai.onnx.ml (onnx/load.c, node_op) */                                                 \
    X(BINARIZER, Binarizer, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                         \
    /* tensor manipulation */                                                                      \
    X(FLATTEN, Flatten, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(RESHAPE, Reshape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(TRANSPOSE, Transpose, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(CONCAT, Concat, PD_OPF_TENSOR | PD_OPF_FOLD, PD_GRAD_ALL, 0)                                 \
    X(SPLIT, Split, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                       \
    X(SLICE, Slice, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(GATHER, Gather, PD_OPF_TENSOR | PD_OPF_FOLD, 0x1, 0)                                         \
    X(UNSQUEEZE, Unsqueeze, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(SQUEEZE, Squeeze, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(EXPAND, Expand, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(PAD, Pad, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(CONSTANT, Constant, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                         \
    X(SHAPE, Shape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                               \
    X(CONSTANT_OF_SHAPE, ConstantOfShape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)         \
    X(RANGE, Range, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                               \
    X(CUMSUM, CumSum, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(TRILU, Trilu, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(SIZE, Size, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(TILE, Tile, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ONE_HOT, OneHot, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(GATHER_ELEMENTS, GatherElements, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)          \
    X(GATHER_ND, GatherND, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(SCATTER_ELEMENTS, ScatterElements, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)        \
    X(SCATTER_ND, ScatterND, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)                    \
    X(SCATTER, Scatter, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)                         \
    X(TENSOR_SCATTER, TensorScatter, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)            \
    X(ARG_MAX, ArgMax, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(ARG_MIN, ArgMin, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(TOP_K, TopK, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                              \
    X(HARDMAX, Hardmax, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                           \
    X(DEPTH_TO_SPACE, DepthToSpace, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)             \
    X(SPACE_TO_DEPTH, SpaceToDepth, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)             \
    X(CUMPROD, CumProd, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(EYE_LIKE, EyeLike, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(COMPRESS, Compress, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                       \
    X(REVERSE_SEQUENCE, ReverseSequence, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)        \
    X(NON_ZERO, NonZero, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(TFIDF_VECTORIZER, TfIdfVectorizer, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)          \
    X(ARRAY_FEATURE_EXTRACTOR, ArrayFeatureExtractor, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)\
    /* signal: windows and the mel matrix take scalars (their sizes constant at load) */           \
    X(HANN_WINDOW, HannWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                    \
    X(HAMMING_WINDOW, HammingWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)              \
    X(BLACKMAN_WINDOW, BlackmanWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)            \
    X(MEL_WEIGHT_MATRIX, MelWeightMatrix, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)         \
    X(DFT, DFT, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(STFT, STFT, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    /* output sizes that depend on the data: only folded at load */                                \
    X(NMS, NonMaxSuppression, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                     \
    X(UNIQUE, Unique, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)

typedef enum pd_op {
#define PD__OP_ENUM(e, name, flags, grad, state) PD_OP_##e,
    PD_OPS(PD__OP_ENUM)
#undef PD__OP_ENUM
        PD_OP_COUNT
} pd_op;

#endif
