/* elementwise.c - CPU forward kernels (elem ops). PLACEHOLDER: to be written. */
#include "../../core/pd_internal.h"

pd_status pd__cpu_Add(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Sub(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Mul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Div(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Pow(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Sum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Sqrt(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Exp(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Log(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Neg(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Reciprocal(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Relu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_LeakyRelu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Sigmoid(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Tanh(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Gelu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Erf(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Clip(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Equal(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Where(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Cast(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_Identity(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_ReduceMean(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
pd_status pd__cpu_ReduceSum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) { (void)x; (void)n; (void)in; (void)out; return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel"); }
