/* ops.c - the op table, expanded from the one list in ops.h. */
#include "pd_internal.h"

#include <string.h>

const pd__op_def pd__ops[PD_OP_COUNT] = {
/* in enum order: the enum is expanded from the same list (no designators, so C++ compiles it too) */
#define PD__OP_DEF(e, name, flags, grad, state) {#name, flags, grad, state, pd__shape_##name, pd__flops_##name},
    PD_OPS(PD__OP_DEF)
#undef PD__OP_DEF
};

int pd__op_lookup(const char *onnx_name) {
    if (!onnx_name) return -1;
    for (int i = 0; i < PD_OP_COUNT; i++)
        if (strcmp(pd__ops[i].name, onnx_name) == 0) return i;
    return -1;
}
