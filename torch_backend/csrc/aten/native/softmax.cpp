// softmax and log_softmax with their backwards on neuron (ops/softmax.h).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>

#include "aten/native/launch.h"
#include "aten/native/util.h"
#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

void launch_softmax(const at::Tensor& out, const at::Tensor& in, int64_t dim, bool log) {
    Launch l("softmax");
    l.out(out);
    l.in(in);
    l.scalar(dim).scalar(static_cast<int64_t>(log));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::softmax(kb, d[0], d[1], dim, log); });
}

// A 0-dim tensor is a softmax over one element: its [1] view (the dim checked as for a 0-dim tensor).
at::Tensor as_1d(const at::Tensor& t, int64_t* dim) {
    *dim = c10::maybe_wrap_dim(*dim, t.dim());
    if (t.dim() != 0) return t;
    *dim = 0;
    return t.view({1});
}

template <bool Log, class FallbackOp>
at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
    if (!float_tensors({&self})) return run_fallback<FallbackOp>(self, dim, half_to_float);
    if (self.dim() == 0) {
        const at::Tensor in = as_1d(self, &dim);
        return softmax<Log, FallbackOp>(in, dim, half_to_float).view(at::IntArrayRef{});
    }
    dim = c10::maybe_wrap_dim(dim, self.dim());
    at::Tensor out = at::empty(self.sizes(), self.options().dtype(half_to_float ? c10::kFloat : self.scalar_type()));
    launch_softmax(out, self, dim, Log);
    return out;
}

template <bool Log, class FallbackOp>
at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
    if (!float_tensors({&self, &out})) return run_fallback<FallbackOp>(self, dim, half_to_float, out);
    at::native::resize_output(out, self.sizes());
    const at::Tensor in = as_1d(self, &dim);
    launch_softmax(self.dim() == 0 ? out.view({1}) : out, in, dim, Log);
    return out;
}

template <bool Log, class FallbackOp>
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, int64_t dim, c10::ScalarType input_dtype) {
    if (!float_tensors({&grad, &output}) || grad.sizes() != output.sizes())
        return run_fallback<FallbackOp>(grad, output, dim, input_dtype);
    if (output.dim() == 0) {
        const at::Tensor out1 = as_1d(output, &dim);
        return softmax_backward<Log, FallbackOp>(grad.view({1}), out1, dim, input_dtype).view(at::IntArrayRef{});
    }
    dim = c10::maybe_wrap_dim(dim, output.dim());
    at::Tensor grad_in = at::empty(grad.sizes(), grad.options().dtype(input_dtype));
    Launch l("softmax_backward");
    l.out(grad_in);
    l.in(grad);
    l.in(output);
    l.scalar(dim).scalar(static_cast<int64_t>(Log));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::softmax_backward(kb, d[0], d[1], d[2], dim, Log); });
    return grad_in;
}


}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_softmax", softmax<false, at::_ops::_softmax>);
    m.impl("_softmax.out", softmax_out<false, at::_ops::_softmax_out>);
    m.impl("_log_softmax", softmax<true, at::_ops::_log_softmax>);
    m.impl("_log_softmax.out", softmax_out<true, at::_ops::_log_softmax_out>);
    m.impl("_softmax_backward_data", softmax_backward<false, at::_ops::_softmax_backward_data>);
    m.impl("_log_softmax_backward_data", softmax_backward<true, at::_ops::_log_softmax_backward_data>);
}

}  // namespace trnsim::neuron
