// Random operators. Values come from the device's Philox generator (never the
// CPU generator), element i of the result (in row-major order) taking the
// i-th draw of the counter block the op reserved, so a seed fixes the values.
// The values are produced on the host and written to device memory with a
// host-to-device copy; a device-side Philox kernel can replace that later
// without changing the values.
//
// Timing-only mode (devices hold no values): every op still reserves exactly the
// Philox words it would draw, so the generator's offset advances as in
// functional mode, and makes the same device transfers, so simulated time is
// the same; but it computes no values, and the host buffers it copies to the
// device stay uninitialized (never touched, so they take no host memory).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "aten/native/random_draws.h"
#include "runtime/devices.h"
#include "runtime/generator.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

using namespace random_detail;

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
    check_floating(self, "uniform_");
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
                " > to=", to);
    bool w = wide(self);
    PhiloxWords words(generator_for(gen, self), self.numel() * (w ? 2 : 1));
    return fill_from_host(self, w ? at::kDouble : at::kFloat,
                          [&](int64_t) { return from + words.uniform(w) * (to - from); });
}

// Standard normal samples (Box-Muller, one sample per pair of uniforms).
at::Tensor standard_normal(const at::Tensor& like, NeuronGenerator* gen, at::ScalarType dtype) {
    bool w = dtype == at::kDouble;
    PhiloxWords words(gen, like.numel() * (w ? 4 : 2));
    at::Tensor host = host_buffer(like, w ? at::kDouble : at::kFloat);
    AT_DISPATCH_FLOATING_TYPES(host.scalar_type(), "trnsim_normal", [&] {
        scalar_t* out = host.data_ptr<scalar_t>();
        for (int64_t i = 0, n = host.numel(); i < n; ++i) {
            double u1 = 1.0 - words.uniform(w);   // (0, 1]: log is finite
            double u2 = words.uniform(w);
            out[i] = static_cast<scalar_t>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
        }
    });
    return host;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
    check_floating(self, "normal_");
    TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
    if (timing_only()) {
        PhiloxWords words(generator_for(gen, self), self.numel() * (wide(self) ? 4 : 2));   // as standard_normal
        return write_without_values(self);
    }
    at::Tensor z = standard_normal(self, generator_for(gen, self), self.scalar_type());
    self.copy_(z.mul_(std).add_(mean));
    return self;
}

// normal with tensor mean and/or std: mean + std * z, broadcast, computed on the host.
at::Tensor normal_tensors(const at::Tensor& mean, const at::Tensor& std, const at::Tensor& like,
                          std::optional<at::Generator> gen) {
    at::Tensor host_std = to_host(std, std.scalar_type());
    TORCH_CHECK(timing_only() || at::all(host_std >= 0).item<bool>(), "normal expects all elements of std >= 0.0");
    at::Tensor host_mean = to_host(mean, mean.scalar_type());
    at::Tensor out = at::empty(like.sizes(), like.options());
    if (timing_only()) {
        PhiloxWords words(generator_for(gen, out), out.numel() * (wide(out) ? 4 : 2));   // as standard_normal
        return write_without_values(out);
    }
    at::Tensor z = standard_normal(out, generator_for(gen, out), out.scalar_type());
    out.copy_(z.mul_(host_std).add_(host_mean));
    return out;
}

at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
    return normal_tensors(mean, at::scalar_tensor(std, mean.options().device(at::kCPU)), mean, gen);
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
    return normal_tensors(at::scalar_tensor(mean, std.options().device(at::kCPU)), std, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std,
                                std::optional<at::Generator> gen) {
    at::Tensor like = at::empty(at::infer_size(mean.sizes(), std.sizes()), mean.options());
    return normal_tensors(mean, std, like, gen);
}

at::Tensor& bernoulli_tensor_(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
    if (timing_only()) {
        (void)to_host(p, at::kDouble);
        PhiloxWords words(generator_for(gen, self), self.numel() * 2);
        return write_without_values(self);
    }
    at::Tensor probs = p.to(at::kCPU, at::kDouble).expand(self.sizes()).contiguous();
    TORCH_CHECK(at::all(probs.ge(0).logical_and(probs.le(1))).item<bool>(),
                "bernoulli_ expects all probabilities in [0, 1]");
    const double* pr = probs.data_ptr<double>();
    PhiloxWords words(generator_for(gen, self), self.numel() * 2);
    return fill_from_host(self, at::kFloat, [&](int64_t i) { return words.uniform(true) < pr[i] ? 1 : 0; });
}

at::Tensor& bernoulli_float_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
    TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    PhiloxWords words(generator_for(gen, self), self.numel() * 2);
    return fill_from_host(self, at::kFloat, [&](int64_t) { return words.uniform(true) < p ? 1 : 0; });
}

// Integers uniformly in [from, from + range) (range 0 means the full 64-bit range).
at::Tensor& random_in(at::Tensor& self, int64_t from, uint64_t range, std::optional<at::Generator> gen) {
    PhiloxWords words(generator_for(gen, self), self.numel() * 2);
    bool floating = at::isFloatingType(self.scalar_type());
    return fill_from_host(self, floating ? at::kDouble : at::kLong, [&](int64_t) {
        uint64_t r = static_cast<uint64_t>(words.next()) << 32 | words.next();
        return static_cast<int64_t>(static_cast<uint64_t>(from) + (range ? r % range : r));
    });
}

at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> gen) {
    if (to) {
        TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                    " >= to=", *to);
        return random_in(self, from, static_cast<uint64_t>(*to) - static_cast<uint64_t>(from), gen);
    }
    // No upper bound: up to the largest integer the dtype represents exactly.
    int64_t top = self.scalar_type() == at::kBool ? 1 : std::numeric_limits<int64_t>::max();
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, self.scalar_type(), "trnsim_random_", [&] {
        if constexpr (std::is_floating_point_v<scalar_t> || std::is_same_v<scalar_t, at::Half> ||
                      std::is_same_v<scalar_t, at::BFloat16>)
            top = int64_t{1} << std::numeric_limits<scalar_t>::digits;
        else if constexpr (!std::is_same_v<scalar_t, bool>)
            top = static_cast<int64_t>(std::numeric_limits<scalar_t>::max());
    });
    return random_in(self, from, static_cast<uint64_t>(top - from) + 1, gen);
}

at::Tensor& random_to_(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
    return random_from_(self, 0, to, gen);
}

at::Tensor& random_default_(at::Tensor& self, std::optional<at::Generator> gen) {
    return random_from_(self, 0, std::nullopt, gen);
}

at::Tensor& exponential_(at::Tensor& self, double lambda, std::optional<at::Generator> gen) {
    check_floating(self, "exponential_");
    TORCH_CHECK(lambda > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambda);
    bool w = wide(self);
    PhiloxWords words(generator_for(gen, self), self.numel() * (w ? 2 : 1));
    return fill_from_host(self, w ? at::kDouble : at::kFloat,
                          [&](int64_t) { return -std::log1p(-words.uniform(w)) / lambda; });
}

// Geometric on {1, 2, ...}: the number of Bernoulli(p) trials to the first success,
// ceil(log(1 - u) / log(1 - p)).
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
    TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
    PhiloxWords words(generator_for(gen, self), self.numel() * 2);
    const bool floating = at::isFloatingType(self.scalar_type());
    return fill_from_host(self, floating ? at::kDouble : at::kLong, [&](int64_t) {
        return std::max(1.0, std::ceil(std::log1p(-words.uniform(true)) / std::log1p(-p)));
    });
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
    check_floating(self, "log_normal_");
    TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
    if (timing_only()) {
        PhiloxWords words(generator_for(gen, self), self.numel() * (wide(self) ? 4 : 2));   // as standard_normal
        return write_without_values(self);
    }
    at::Tensor z = standard_normal(self, generator_for(gen, self), self.scalar_type());
    self.copy_(z.mul_(std).add_(mean).exp_());
    return self;
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
    check_floating(self, "cauchy_");
    TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
    bool w = wide(self);
    PhiloxWords words(generator_for(gen, self), self.numel() * (w ? 2 : 1));
    return fill_from_host(self, w ? at::kDouble : at::kFloat,
                          [&](int64_t) { return median + sigma * std::tan(M_PI * (words.uniform(w) - 0.5)); });
}

// The out= forms of normal: the functional result, written to out (resized as ATen does).
at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
    at::native::resize_output(out, result.sizes());
    out.copy_(result);
    return out;
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                     at::Tensor& out) {
    return into(out, normal_tensor_tensor(mean, std, gen));
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
    return into(out, normal_tensor_float(mean, std, gen));
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
    return into(out, normal_float_tensor(mean, std, gen));
}

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
    if (train.has_value() && !*train) {
        return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
    }
    at::Tensor keep = at::empty_like(input, input.options().dtype(at::kBool));
    bernoulli_float_(keep, 1.0 - p, std::nullopt);
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    at::Tensor out = at::empty_like(input);
    at::Tensor host_input = to_host(input, input.scalar_type());
    at::Tensor host_keep = to_host(keep, keep.scalar_type());
    if (timing_only()) return {write_without_values(out), keep};
    out.copy_(host_input.mul(host_keep).mul_(scale));
    return {out, keep};
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
    TORCH_CHECK(n >= 0, "randperm expects n >= 0, got ", n);
    out.resize_({n});
    PhiloxWords words(generator_for(gen, out), static_cast<uint64_t>(n) * 2);
    if (timing_only()) return write_without_values(out);
    at::Tensor host = at::arange(n, at::TensorOptions().dtype(at::kLong));
    int64_t* v = host.data_ptr<int64_t>();
    for (int64_t i = n - 1; i > 0; --i) {   // Fisher-Yates
        uint64_t r = static_cast<uint64_t>(words.next()) << 32 | words.next();
        std::swap(v[i], v[r % static_cast<uint64_t>(i + 1)]);
    }
    out.copy_(host);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("uniform_", uniform_);
    m.impl("normal_", normal_);
    m.impl("normal.Tensor_float", normal_tensor_float);
    m.impl("normal.float_Tensor", normal_float_tensor);
    m.impl("normal.Tensor_Tensor", normal_tensor_tensor);
    m.impl("bernoulli_.float", bernoulli_float_);
    m.impl("bernoulli_.Tensor", bernoulli_tensor_);
    m.impl("random_", random_default_);
    m.impl("random_.to", random_to_);
    m.impl("random_.from", random_from_);
    m.impl("exponential_", exponential_);
    m.impl("geometric_", geometric_);
    m.impl("log_normal_", log_normal_);
    m.impl("cauchy_", cauchy_);
    m.impl("normal.Tensor_Tensor_out", normal_tensor_tensor_out);
    m.impl("normal.Tensor_float_out", normal_tensor_float_out);
    m.impl("normal.float_Tensor_out", normal_float_tensor_out);
    m.impl("native_dropout", native_dropout);
    m.impl("randperm.generator_out", randperm_out);
}

}  // namespace trnsim::neuron
