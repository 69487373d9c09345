// Autocast for neuron: ops not listed run unchanged; matmul-like ops run in
// the autocast dtype (bfloat16 by default, the native TensorE input type);
// numerically sensitive ops (reductions, norms, losses, softmax) run in fp32.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace trnsim::neuron {
namespace {

using at::autocast::CastPolicy;

#define NEURON_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
    AT_FORALL_LOWER_PRECISION_FP(NEURON_LOWER_PRECISION)
    AT_FORALL_FP32(NEURON_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
    AT_FORALL_PROMOTE(NEURON_PROMOTE)
    NEURON_FP32(cross_entropy_loss)
}

const bool default_dtype_set = [] {
    at::autocast::set_autocast_dtype(at::kPrivateUse1, at::kBFloat16);
    return true;
}();

}  // namespace
}  // namespace trnsim::neuron
