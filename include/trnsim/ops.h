// The eager operator library: one kernel builder per tensor operation, written
// against KernelBuilder and the ISA, with no framework types. The PyTorch
// backend turns each ATen call into one of these (cached per signature), the
// compiler reuses them for nodes it does not fuse.
//
// Conventions
//  * A TensorDesc is a strided view (sizes/strides in elements, like ATen) of one
//    launch argument. Kernels are relocatable: they address HBM only through
//    launch arguments (AccessPattern::arg), so one cached Program serves every
//    tensor with the same signature. Argument k of the Program is the
//    TensorDesc's 'arg' (1-based, as AccessPattern::arg).
//  * Outputs are written whole; outputs never alias inputs unless the builder
//    was told so with KernelBuilder::set_args_may_alias(true).
//  * Engines compute in fp32 and round to the output dtype (ISA semantics), so
//    results match PyTorch CPU for fp32 to within reduction-order effects.
//  * Unsupported dtypes/shapes throw OpError with a message naming the op.
//
// Each family has its header under trnsim/ops/ and its kernels in src/ops/<family>.cpp; the
// PyTorch registrations mirror them in torch_backend/csrc/aten/native/<family>.cpp.
#pragma once

#include "trnsim/tiling.h"   // TensorDesc, OpError

#include "trnsim/ops/attention.h"
#include "trnsim/ops/attention_decode.h"
#include "trnsim/ops/conv.h"
#include "trnsim/ops/indexing.h"
#include "trnsim/ops/losses.h"
#include "trnsim/ops/matmul.h"
#include "trnsim/ops/norms.h"
#include "trnsim/ops/optim.h"
#include "trnsim/ops/pointwise.h"
#include "trnsim/ops/reductions.h"
#include "trnsim/ops/rnn.h"
#include "trnsim/ops/scan.h"
#include "trnsim/ops/sort.h"
#include "trnsim/ops/softmax.h"

namespace trnsim::ops {
using trnsim::OpError;
using trnsim::TensorDesc;
}  // namespace trnsim::ops
