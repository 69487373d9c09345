// Integer and boolean tensors on neuron: the reductions and scans the other families route here
// (sum, prod, max/min, argmax/argmin, cumsum/cumprod), and the data movement (copies and casts
// between integer dtypes, cat, tril/triu); integer.h.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>

#include "aten/native/integer.h"
#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron::integer {

namespace {

// out = in: DMAs for equal dtypes (bit exact, no engine work), the GpSimd's cast otherwise.
void copy_into(const at::Tensor& out, const at::Tensor& in) {
    if (out.scalar_type() != in.scalar_type()) {
        launch_unary(IntOp::copy, out, in);
        return;
    }
    launch_copy(out, in);
}

c10::SmallVector<int64_t, 6> wrapped_dims(const at::Tensor& self, at::OptionalIntArrayRef dims) {
    c10::SmallVector<int64_t, 6> out;
    if (dims.has_value() && !dims->empty())
        for (int64_t d : *dims) out.push_back(c10::maybe_wrap_dim(d, std::max<int64_t>(self.dim(), 1)));
    else
        for (int64_t d = 0; d < self.dim(); ++d) out.push_back(d);
    std::sort(out.begin(), out.end());
    TORCH_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "dim appears multiple times in the list of dims");
    return out;
}

at::DimVector kept_shape(const at::Tensor& self, c10::ArrayRef<int64_t> dims, bool keepdim) {
    at::DimVector shape;
    for (int64_t d = 0; d < self.dim(); ++d) {
        if (std::find(dims.begin(), dims.end(), d) == dims.end()) shape.push_back(self.size(d));
        else if (keepdim) shape.push_back(1);
    }
    return shape;
}

}  // namespace

bool copy(const at::Tensor& dst, const at::Tensor& src) {
    if (!int_tensor(dst) || !int_tensor(src) || src.device() != dst.device()) return false;
    copy_into(dst, src);
    return true;
}

bool cat(c10::ArrayRef<at::Tensor> inputs, int64_t dim, at::Tensor& result) {
    if (inputs.empty()) return false;
    const at::Tensor& first = inputs.front();
    c10::ScalarType dt = first.scalar_type();
    for (const at::Tensor& t : inputs) {
        // Legacy 1-d empty tensors (skipped by PyTorch's cat) are left to the CPU.
        if (!int_tensor(t) || t.dim() != first.dim() || t.dim() == 0 || t.device() != first.device()) return false;
        dt = at::promote_types(dt, t.scalar_type());
    }
    dim = c10::maybe_wrap_dim(dim, first.dim());
    at::DimVector sizes(first.sizes().begin(), first.sizes().end());
    sizes[dim] = 0;
    for (const at::Tensor& t : inputs) {
        for (int64_t d = 0; d < first.dim(); ++d)
            TORCH_CHECK(d == dim || t.size(d) == first.size(d), "Sizes of tensors must match except in dimension ", dim,
                        ". Expected size ", first.size(d), " but got size ", t.size(d), " for tensor number 1 in the list.");
        sizes[dim] += t.size(dim);
    }
    result = at::empty(sizes, first.options().dtype(dt));
    int64_t offset = 0;
    for (const at::Tensor& t : inputs) {
        if (t.size(dim) > 0) copy_into(result.narrow(dim, offset, t.size(dim)), t);
        offset += t.size(dim);
    }
    return true;
}

bool tril(const at::Tensor& out, const at::Tensor& self, int64_t k, bool upper) {
    if (!int_tensor(self) || !int_tensor(out) || self.dim() < 2 || out.scalar_type() != self.scalar_type()) return false;
    const int64_t R = self.size(-2), C = self.size(-1);
    if (out.numel() == 0) return true;
    // drop[r, c] = c - r > k (tril) or c - r < k (triu): arange columns minus arange rows.
    at::Tensor rows = at::empty({R, 1}, self.options().dtype(c10::kLong));
    at::Tensor cols = at::empty({1, C}, self.options().dtype(c10::kLong));
    launch_arange(rows.view({R}), 0, 1);
    launch_arange(cols.view({C}), 0, 1);
    at::Tensor diff = at::empty({R, C}, rows.options());
    launch_binary(IntOp::sub, diff, cols, rows);
    at::Tensor drop = at::empty({R, C}, rows.options().dtype(c10::kBool));
    launch_binary_scalar(upper ? IntOp::lt : IntOp::gt, drop, diff, k, false);
    launch_masked_fill(out, self, drop, 0);
    return true;
}

// ---------------------------------------------------------------- reductions

bool sum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<c10::ScalarType> dtype,
         at::Tensor& result) {
    if (!int_tensor(self)) return false;
    const c10::ScalarType dt = dtype.value_or(c10::kLong);
    if (!is_int(dt)) return false;
    const auto dims = wrapped_dims(self, dim);
    result = at::empty(kept_shape(self, dims, keepdim), self.options().dtype(dt));
    launch_reduce(IntOp::add, result, self, dims);
    return true;
}

bool max_min_all(bool max, const at::Tensor& self, at::Tensor& result) {
    if (!int_tensor(self) || self.numel() == 0) return false;
    result = at::empty({}, self.options());
    launch_reduce(max ? IntOp::max : IntOp::min, result, self, wrapped_dims(self, std::nullopt));
    return true;
}

bool max_min_dim(bool max, const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& values, at::Tensor& indices) {
    if (!int_tensor(self) || self.numel() == 0 || self.dim() == 0) return false;
    dim = c10::maybe_wrap_dim(dim, self.dim());
    const int64_t d[1] = {dim};
    values = at::empty(kept_shape(self, d, keepdim), self.options());
    indices = at::empty(kept_shape(self, d, keepdim), self.options().dtype(c10::kLong));
    launch_reduce(max ? IntOp::max : IntOp::min, values, self, d);
    launch_reduce(max ? IntOp::argmax : IntOp::argmin, indices, self, d);
    return true;
}

bool arg_max_min(bool max, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& result) {
    if (!int_tensor(self) || self.numel() == 0 || self.dim() == 0) return false;
    const IntOp op = max ? IntOp::argmax : IntOp::argmin;
    if (!dim) {
        at::Tensor index = at::empty({}, self.options().dtype(c10::kLong));
        const int64_t d[1] = {0};
        launch_reduce(op, index, self.reshape({-1}), d);
        result = keepdim ? index.view(at::DimVector(self.dim(), 1)) : index;
        return true;
    }
    const int64_t d[1] = {c10::maybe_wrap_dim(*dim, self.dim())};
    result = at::empty(kept_shape(self, d, keepdim), self.options().dtype(c10::kLong));
    launch_reduce(op, result, self, d);
    return true;
}

bool scan(IntOp op, const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype, at::Tensor& result) {
    const c10::ScalarType dt = dtype.value_or(c10::kLong);
    if (!int_tensor(self) || !is_int(dt)) return false;
    result = at::empty(self.sizes(), self.options().dtype(dt));
    launch_scan(op, result, self, c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1)));
    return true;
}

bool scan_(IntOp op, at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {
    if (!int_tensor(self) || dtype.value_or(self.scalar_type()) != self.scalar_type()) return false;
    launch_scan(op, self, self, c10::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1)));
    return true;
}

bool prod(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, std::optional<c10::ScalarType> dtype,
          at::Tensor& result) {
    const c10::ScalarType dt = dtype.value_or(c10::kLong);
    if (!int_tensor(self) || !is_int(dt)) return false;
    c10::SmallVector<int64_t, 6> dims;
    if (dim) dims.push_back(c10::maybe_wrap_dim(*dim, std::max<int64_t>(self.dim(), 1)));
    else dims = wrapped_dims(self, std::nullopt);
    if (self.dim() == 0) dims.clear();
    result = at::empty(kept_shape(self, dims, keepdim), self.options().dtype(dt));
    launch_reduce(IntOp::mul, result, self, dims);
    return true;
}

}  // namespace trnsim::neuron::integer
