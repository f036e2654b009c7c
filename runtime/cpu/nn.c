/* nn.c - CPU forward kernels (nn ops). PLACEHOLDER: to be written. */
#include "../../core/pd_internal.h"

pd_status pd__cpu_Gemm(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_MatMul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Conv(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_ConvTranspose(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_BatchNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_LayerNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_MaxPool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_AveragePool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_GlobalAveragePool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_LRN(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Softmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_LogSoftmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Dropout(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_SoftmaxCrossEntropyLoss(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_NegativeLogLikelihoodLoss(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
