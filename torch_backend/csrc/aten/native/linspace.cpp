// linspace on neuron, PyTorch's two-sided formula in out's dtype: with step = (end - start) / (steps - 1),
// position i holds start + step i in the first half and end - step (steps - 1 - i) in the second, so
// both ends are exact. The positions come from the arange kernel (exact below 2^24), the rest is
// VectorE arithmetic and a select. Integer and complex outputs run on the CPU.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/native/integer.h"
#include "aten/native/util.h"

namespace trnsim::neuron {
namespace {

constexpr int64_t kExactPositions = int64_t(1) << 24;

at::Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, at::Tensor& out) {
    TORCH_CHECK(steps >= 0, "linspace: number of steps must be non-negative");
    if (!out.is_privateuseone() || !is_kernel_float(out.scalar_type()) || start.isComplex() || end.isComplex() ||
        steps >= kExactPositions)
        return run_fallback<at::_ops::linspace_out>(start, end, steps, out);
    if (out.numel() != steps) out.resize_({steps});
    if (steps == 0) return out;
    // The arithmetic of the CPU kernel in out's dtype: start, end, the step and the positions rounded
    // to it, each product and sum rounded again (fp32 operations rounded on store).
    const c10::ScalarType t = out.scalar_type();
    const auto round = [t](double v) { return at::scalar_tensor(v, at::kFloat).to(t).item<double>(); };
    const double s = round(start.toDouble()), e = round(end.toDouble());
    if (steps == 1) return out.fill_(s);
    const double step = round(static_cast<float>(round(e - s)) / static_cast<float>(round(static_cast<double>(steps - 1))));
    at::Tensor i = at::empty({steps}, out.options());
    integer::launch_arange(i, 0, 1);
    const at::Tensor first = i.mul(step).add(s);
    const at::Tensor second = i.sub(static_cast<double>(steps - 1)).mul(step).add(e);   // e - step (steps - 1 - i)
    out.copy_(at::where(i.lt(static_cast<double>(steps / 2)), first, second));
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("linspace.out", linspace_out);
}

}  // namespace trnsim::neuron
