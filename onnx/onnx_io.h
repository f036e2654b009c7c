/* onnx_io.h - ONNX files beyond the model: TensorProto (.pb) reading, used by
 * the conformance runner. Private to the library and its tools. */
#ifndef PD_ONNX_IO_H
#define PD_ONNX_IO_H

#include "../pipedream.h"

/* Reads a serialized TensorProto (ONNX test data's input_N.pb / output_N.pb).
 * On success *out owns its data (free with pd_tensor_free); *name_out, when
 * not NULL, gets a malloc'd copy of the tensor's name ("" when it has none).
 * Sequence/Optional protos and string tensors give PD_ERR_UNSUPPORTED. */
pd_status pd__tensor_pb_load(const char *path, pd_tensor *out, char **name_out);

#endif
