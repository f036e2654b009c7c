/* decode.h - helpers shared by the ONNX model reader (load.c) and the
 * TensorProto reader (tensor_pb.c); all defined in tensor_pb.c. Private. */
#ifndef PD_ONNX_DECODE_H
#define PD_ONNX_DECODE_H

#include <stddef.h>

#include "../core/pd_internal.h"
#include "onnx.pb-c.h"

/* Decodes a TensorProto into *out (dtype, shape, data owned: PD_MALLOC'd, at
 * least one byte even for an empty tensor). `what` starts every error message
 * ("model.onnx: initializer 'W'"). External data is read relative to base_dir
 * and refused when base_dir is NULL. On failure *out is untouched. */
pd_status pd__decode_tensor(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                            pd_tensor *out);

/* Element size of the ONNX data types we decode (TensorProto.DataType
 * numbering, as pd_dtype); 0 for the others (string, complex, float8, int4...). */
size_t pd__onnx_dtype_size(int32_t dt);
/* ONNX's name of a data type, refused ones included ("unknown" past the list). */
const char *pd__onnx_type_name(int32_t dt);

/* The folder of a path ("." when it has none), PD_MALLOC'd; NULL when out of memory. */
char *pd__dir_of(const char *path);

/* Walks a serialized message of type `desc` without unpacking it: returns
 * PD__PB_MALFORMED for broken wire data, PD__PB_TOO_DEEP when messages nest
 * deeper than max_depth (protobuf-c's unpacker recurses once per level and
 * would run out of stack on hostile input), else PD__PB_OK. */
enum { PD__PB_OK = 0, PD__PB_MALFORMED, PD__PB_TOO_DEEP };
int pd__pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int max_depth);

#define PD__PB_MAX_DEPTH 100

/* Reads a protobuf varint at *p (before end) into *v and moves *p past it;
 * false when it runs past end or 64 bits. */
bool pd__pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

#endif
