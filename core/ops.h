/* ops.h - the one list of operators.
 *
 * Every op is declared once here. X(ENUM, OnnxName, flags, grad) expands into
 * the pd_op enum, the name table, and the names of its functions:
 *   pd__shape_<OnnxName>    (core/shape_*.c)   output dtypes and shapes
 *   pd__flops_<OnnxName>    (core/shape_*.c)   forward FLOP count
 *   pd__cpu_<OnnxName>      (runtime/cpu/)     CPU forward kernel
 *   pd__cpu_<OnnxName>_bwd  (runtime/cpu/)     CPU backward kernel
 * grad: bit i set when input i is differentiable (gradients flow into it);
 * PD_GRAD_ALL for variadic ops. 0: the op is not differentiable.
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
#define PD_GRAD_ALL 0xffffffffu

#define PD_OPS(X)                                             \
    /* neural-network ops */                                  \
    X(GEMM, Gemm, PD_OPF_NN, 0x7)                                  \
    X(MATMUL, MatMul, PD_OPF_NN, 0x3)                              \
    X(CONV, Conv, PD_OPF_NN, 0x7)                                  \
    X(CONV_TRANSPOSE, ConvTranspose, PD_OPF_NN, 0x7)               \
    X(BATCH_NORM, BatchNormalization, PD_OPF_NN, 0x7)              \
    X(LAYER_NORM, LayerNormalization, PD_OPF_NN, 0x7)              \
    X(MAX_POOL, MaxPool, PD_OPF_NN, 0x1)                           \
    X(AVERAGE_POOL, AveragePool, PD_OPF_NN, 0x1)                   \
    X(GLOBAL_AVERAGE_POOL, GlobalAveragePool, PD_OPF_NN, 0x1)      \
    X(LRN, LRN, PD_OPF_NN, 0x1)                                    \
    X(SOFTMAX, Softmax, PD_OPF_NN, 0x1)                            \
    X(LOG_SOFTMAX, LogSoftmax, PD_OPF_NN, 0x1)                     \
    X(DROPOUT, Dropout, PD_OPF_NN, 0x1)                            \
    X(SOFTMAX_CE_LOSS, SoftmaxCrossEntropyLoss, PD_OPF_NN, 0x1)    \
    X(NLL_LOSS, NegativeLogLikelihoodLoss, PD_OPF_NN, 0x1)         \
    /* element-wise */                                        \
    X(ADD, Add, PD_OPF_FOLD, 0x3)                                  \
    X(SUB, Sub, PD_OPF_FOLD, 0x3)                                  \
    X(MUL, Mul, PD_OPF_FOLD, 0x3)                                  \
    X(DIV, Div, PD_OPF_FOLD, 0x3)                                  \
    X(POW, Pow, PD_OPF_FOLD, 0x3)                                  \
    X(SUM, Sum, PD_OPF_FOLD, PD_GRAD_ALL)                                  \
    X(SQRT, Sqrt, PD_OPF_FOLD, 0x1)                                \
    X(EXP, Exp, PD_OPF_FOLD, 0x1)                                  \
    X(LOG, Log, PD_OPF_FOLD, 0x1)                                  \
    X(NEG, Neg, PD_OPF_FOLD, 0x1)                                  \
    X(RECIPROCAL, Reciprocal, PD_OPF_FOLD, 0x1)                    \
    X(RELU, Relu, PD_OPF_FOLD, 0x1)                                \
    X(LEAKY_RELU, LeakyRelu, PD_OPF_FOLD, 0x1)                     \
    X(SIGMOID, Sigmoid, PD_OPF_FOLD, 0x1)                          \
    X(TANH, Tanh, PD_OPF_FOLD, 0x1)                                \
    X(GELU, Gelu, PD_OPF_FOLD, 0x1)                                \
    X(ERF, Erf, PD_OPF_FOLD, 0x1)                                  \
    X(CLIP, Clip, PD_OPF_FOLD, 0x1)                                \
    X(EQUAL, Equal, PD_OPF_FOLD, 0)                              \
    X(WHERE, Where, PD_OPF_FOLD, 0x6)                              \
    X(CAST, Cast, PD_OPF_FOLD, 0x1)                                \
    X(IDENTITY, Identity, PD_OPF_FOLD, 0x1)                        \
    /* reductions */                                          \
    X(REDUCE_MEAN, ReduceMean, PD_OPF_FOLD, 0x1)                   \
    X(REDUCE_SUM, ReduceSum, PD_OPF_FOLD, 0x1)                     \
    /* tensor manipulation */                                 \
    X(FLATTEN, Flatten, PD_OPF_FOLD, 0x1)                          \
    X(RESHAPE, Reshape, PD_OPF_FOLD, 0x1)                          \
    X(TRANSPOSE, Transpose, PD_OPF_FOLD, 0x1)                      \
    X(CONCAT, Concat, PD_OPF_FOLD, PD_GRAD_ALL)                            \
    X(SPLIT, Split, PD_OPF_FOLD, 0x1)                              \
    X(SLICE, Slice, PD_OPF_FOLD, 0x1)                              \
    X(GATHER, Gather, PD_OPF_FOLD, 0x1)                            \
    X(UNSQUEEZE, Unsqueeze, PD_OPF_FOLD, 0x1)                      \
    X(SQUEEZE, Squeeze, PD_OPF_FOLD, 0x1)                          \
    X(EXPAND, Expand, PD_OPF_FOLD, 0x1)                            \
    X(PAD, Pad, PD_OPF_FOLD, 0x1)                                  \
    X(CONSTANT, Constant, PD_OPF_FOLD, 0)                        \
    X(SHAPE, Shape, PD_OPF_FOLD, 0)                              \
    X(CONSTANT_OF_SHAPE, ConstantOfShape, PD_OPF_FOLD, 0)        \
    X(RANGE, Range, PD_OPF_FOLD, 0)

typedef enum pd_op {
#define PD__OP_ENUM(e, name, flags, grad) PD_OP_##e,
    PD_OPS(PD__OP_ENUM)
#undef PD__OP_ENUM
        PD_OP_COUNT
} pd_op;

#endif
