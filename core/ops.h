/* ops.h - the one list of operators.
 *
 * Every op is declared once here. X(ENUM, OnnxName, flags) expands into the
 * pd_op enum, the name table, and the names of its functions:
 *   pd__shape_<OnnxName>  (core/shape_*.c)   output dtypes and shapes
 *   pd__flops_<OnnxName>  (core/shape_*.c)   forward FLOP count
 *   pd__cpu_<OnnxName>    (runtime/cpu/)       CPU forward kernel
 * Adding an op: one line here, its shape rule, its kernel.
 *
 * flags: PD_OPF_FOLD - may be constant-folded at load when all inputs are
 * constant; PD_OPF_NN - lives with the neural-network ops (shape_nn.c,
 * cpu/nn.c) rather than the tensor ops (shape_tensor.c, cpu/tensor.c).
 */
#ifndef PD_OPS_H
#define PD_OPS_H

#define PD_OPF_FOLD 1
#define PD_OPF_NN 2

#define PD_OPS(X)                                             \
    /* neural-network ops */                                  \
    X(GEMM, Gemm, PD_OPF_NN)                                  \
    X(MATMUL, MatMul, PD_OPF_NN)                              \
    X(CONV, Conv, PD_OPF_NN)                                  \
    X(CONV_TRANSPOSE, ConvTranspose, PD_OPF_NN)               \
    X(BATCH_NORM, BatchNormalization, PD_OPF_NN)              \
    X(LAYER_NORM, LayerNormalization, PD_OPF_NN)              \
    X(MAX_POOL, MaxPool, PD_OPF_NN)                           \
    X(AVERAGE_POOL, AveragePool, PD_OPF_NN)                   \
    X(GLOBAL_AVERAGE_POOL, GlobalAveragePool, PD_OPF_NN)      \
    X(LRN, LRN, PD_OPF_NN)                                    \
    X(SOFTMAX, Softmax, PD_OPF_NN)                            \
    X(LOG_SOFTMAX, LogSoftmax, PD_OPF_NN)                     \
    X(DROPOUT, Dropout, PD_OPF_NN)                            \
    X(SOFTMAX_CE_LOSS, SoftmaxCrossEntropyLoss, PD_OPF_NN)    \
    X(NLL_LOSS, NegativeLogLikelihoodLoss, PD_OPF_NN)         \
    /* element-wise */                                        \
    X(ADD, Add, PD_OPF_FOLD)                                  \
    X(SUB, Sub, PD_OPF_FOLD)                                  \
    X(MUL, Mul, PD_OPF_FOLD)                                  \
    X(DIV, Div, PD_OPF_FOLD)                                  \
    X(POW, Pow, PD_OPF_FOLD)                                  \
    X(SUM, Sum, PD_OPF_FOLD)                                  \
    X(SQRT, Sqrt, PD_OPF_FOLD)                                \
    X(EXP, Exp, PD_OPF_FOLD)                                  \
    X(LOG, Log, PD_OPF_FOLD)                                  \
    X(NEG, Neg, PD_OPF_FOLD)                                  \
    X(RECIPROCAL, Reciprocal, PD_OPF_FOLD)                    \
    X(RELU, Relu, PD_OPF_FOLD)                                \
    X(LEAKY_RELU, LeakyRelu, PD_OPF_FOLD)                     \
    X(SIGMOID, Sigmoid, PD_OPF_FOLD)                          \
    X(TANH, Tanh, PD_OPF_FOLD)                                \
    X(GELU, Gelu, PD_OPF_FOLD)                                \
    X(ERF, Erf, PD_OPF_FOLD)                                  \
    X(CLIP, Clip, PD_OPF_FOLD)                                \
    X(EQUAL, Equal, PD_OPF_FOLD)                              \
    X(WHERE, Where, PD_OPF_FOLD)                              \
    X(CAST, Cast, PD_OPF_FOLD)                                \
    X(IDENTITY, Identity, PD_OPF_FOLD)                        \
    /* reductions */                                          \
    X(REDUCE_MEAN, ReduceMean, PD_OPF_FOLD)                   \
    X(REDUCE_SUM, ReduceSum, PD_OPF_FOLD)                     \
    /* tensor manipulation */                                 \
    X(FLATTEN, Flatten, PD_OPF_FOLD)                          \
    X(RESHAPE, Reshape, PD_OPF_FOLD)                          \
    X(TRANSPOSE, Transpose, PD_OPF_FOLD)                      \
    X(CONCAT, Concat, PD_OPF_FOLD)                            \
    X(SPLIT, Split, PD_OPF_FOLD)                              \
    X(SLICE, Slice, PD_OPF_FOLD)                              \
    X(GATHER, Gather, PD_OPF_FOLD)                            \
    X(UNSQUEEZE, Unsqueeze, PD_OPF_FOLD)                      \
    X(SQUEEZE, Squeeze, PD_OPF_FOLD)                          \
    X(EXPAND, Expand, PD_OPF_FOLD)                            \
    X(PAD, Pad, PD_OPF_FOLD)                                  \
    X(CONSTANT, Constant, PD_OPF_FOLD)                        \
    X(SHAPE, Shape, PD_OPF_FOLD)                              \
    X(CONSTANT_OF_SHAPE, ConstantOfShape, PD_OPF_FOLD)        \
    X(RANGE, Range, PD_OPF_FOLD)

typedef enum pd_op {
#define PD__OP_ENUM(e, name, flags) PD_OP_##e,
    PD_OPS(PD__OP_ENUM)
#undef PD__OP_ENUM
        PD_OP_COUNT
} pd_op;

#endif
