// Sampling operators that read tensor values to draw: multinomial (with and without
// replacement), poisson and rrelu's noise. As the other random operators (random.cpp), they
// draw from the neuron generator's Philox words: the probabilities (rates, inputs) are copied
// to the host, the samples computed there and written to the device, so a seed fixes them.
//
// multinomial with replacement inverts each row's cumulative distribution at one uniform per
// sample; without replacement it takes the categories of the num_samples largest p / E with
// E ~ Exp(1) drawn per category (the exponential race, which samples sequentially without
// replacement, as PyTorch's CPU kernel does).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "aten/native/random_draws.h"

namespace trnsim::neuron {
namespace {

using namespace random_detail;

void check_multinomial(const at::Tensor& self, int64_t n, bool replacement) {
    TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
                self.scalar_type());
    TORCH_CHECK(n > 0, "cannot sample n_sample <= 0 samples");
    const int64_t categories = self.size(-1);
    TORCH_CHECK(replacement || n <= categories, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    TORCH_CHECK(categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

// Rows [rows, categories] of probabilities in double, checked as the CPU checks them.
at::Tensor probability_rows(const at::Tensor& self, bool replacement, int64_t n) {
    at::Tensor p = self.to(at::kCPU, at::kDouble).reshape({-1, self.size(-1)}).contiguous();
    const double* v = p.const_data_ptr<double>();
    const int64_t rows = p.size(0), cats = p.size(1);
    for (int64_t r = 0; r < rows; ++r) {
        double total = 0;
        int64_t positive = 0;
        for (int64_t c = 0; c < cats; ++c) {
            const double x = v[r * cats + c];
            TORCH_CHECK(std::isfinite(x) && x >= 0, "probability tensor contains either `inf`, `nan` or element < 0");
            total += x;
            positive += x > 0;
        }
        TORCH_CHECK(total > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
        TORCH_CHECK(replacement || positive >= n,
                    "invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)");
    }
    return p;
}

at::Tensor& multinomial_out(const at::Tensor& self, int64_t n, bool replacement, std::optional<at::Generator> gen,
                            at::Tensor& out) {
    check_multinomial(self, n, replacement);
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 1);
    shape.push_back(n);
    at::native::resize_output(out, shape);
    const int64_t rows = self.dim() == 2 ? self.size(0) : 1, cats = self.size(-1);
    PhiloxWords words(generator_for(gen, self), static_cast<uint64_t>(rows) * (replacement ? n : cats) * 2);
    if (timing_only()) {
        (void)to_host(self, at::kDouble);
        return write_without_values(out);
    }
    at::Tensor p = probability_rows(self, replacement, n);
    at::Tensor host = at::empty({rows, n}, at::TensorOptions().dtype(at::kLong));
    int64_t* dst = host.data_ptr<int64_t>();
    const double* prob = p.const_data_ptr<double>();
    std::vector<double> cdf(cats);
    std::vector<std::pair<double, int64_t>> keys(cats);
    for (int64_t r = 0; r < rows; ++r) {
        const double* row = prob + r * cats;
        if (replacement) {
            std::partial_sum(row, row + cats, cdf.begin());
            for (int64_t j = 0; j < n; ++j) {
                const double u = words.uniform(true) * cdf.back();
                // The first category whose cumulative mass exceeds u (never one of mass 0).
                int64_t c = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
                c = std::min(c, cats - 1);
                while (row[c] == 0 && c > 0) --c;
                dst[r * n + j] = c;
            }
        } else {
            for (int64_t c = 0; c < cats; ++c) {
                const double e = -std::log1p(-words.uniform(true));
                keys[c] = {row[c] > 0 ? row[c] / e : -1.0, c};
            }
            std::partial_sort(keys.begin(), keys.begin() + n, keys.end(),
                              [](const auto& a, const auto& b) { return a.first > b.first; });
            for (int64_t j = 0; j < n; ++j) dst[r * n + j] = keys[j].second;
        }
    }
    out.copy_(host.view(out.sizes()));
    return out;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n, bool replacement, std::optional<at::Generator> gen) {
    at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
    return multinomial_out(self, n, replacement, gen, out);
}

// Poisson(rate) per element; each element's sampler is seeded by two Philox words.
at::Tensor poisson(const at::Tensor& rates, std::optional<at::Generator> gen) {
    check_floating(rates, "poisson");
    at::Tensor out = at::empty(rates.sizes(), rates.options());
    PhiloxWords words(generator_for(gen, rates), rates.numel() * 2);
    if (timing_only()) {
        (void)to_host(rates, at::kDouble);
        return write_without_values(out);
    }
    at::Tensor lambda = rates.to(at::kCPU, at::kDouble).contiguous();
    const double* l = lambda.const_data_ptr<double>();
    TORCH_CHECK(at::all(lambda >= 0).item<bool>(), "invalid Poisson rate, expected rate to be non-negative");
    return fill_from_host(out, at::kDouble, [&](int64_t i) {
        std::mt19937_64 engine(static_cast<uint64_t>(words.next()) << 32 | words.next());
        return l[i] == 0 ? 0.0 : static_cast<double>(std::poisson_distribution<int64_t>(l[i])(engine));
    });
}

// rrelu: in training, negative inputs are scaled by a slope drawn uniformly in [lower, upper]
// (kept in noise, 1 where the input is not negative); in evaluation by (lower + upper) / 2.
at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                                 const c10::Scalar& upper, bool training, std::optional<at::Generator> gen,
                                 at::Tensor& out) {
    check_floating(self, "rrelu_with_noise");
    const double lo = lower.toDouble(), hi = upper.toDouble();
    TORCH_CHECK(lo <= hi, "Lower bound should be less than or equal to the upper bound");
    at::native::resize_output(out, self.sizes());
    if (!training) {
        at::Tensor slope = at::where(self >= 0, at::ones_like(self), at::full_like(self, (lo + hi) / 2));
        out.copy_(self * slope);
        return out;
    }
    TORCH_CHECK(noise.sizes() == self.sizes(), "rrelu_with_noise: noise must have the input's shape");
    PhiloxWords words(generator_for(gen, self), self.numel() * 2);
    if (timing_only()) {
        (void)to_host(self, at::kDouble);
        write_without_values(noise);
        return write_without_values(out);
    }
    at::Tensor x = self.to(at::kCPU, at::kDouble).contiguous();
    const double* xv = x.const_data_ptr<double>();
    at::Tensor slopes = at::empty(self.sizes(), at::TensorOptions().dtype(at::kDouble));
    double* sv = slopes.data_ptr<double>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        const double u = words.uniform(true);
        sv[i] = xv[i] < 0 ? lo + u * (hi - lo) : 1.0;
    }
    noise.copy_(slopes);
    out.copy_(x.mul_(slopes));
    return out;
}

at::Tensor rrelu_with_noise_functional(const at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                            const c10::Scalar& upper, bool training, std::optional<at::Generator> gen) {
    at::Tensor out = at::empty_like(self);
    return rrelu_with_noise_out(self, noise, lower, upper, training, gen, out);
}

at::Tensor& rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const c10::Scalar& lower,
                              const c10::Scalar& upper, bool training, std::optional<at::Generator> gen) {
    at::Tensor result = rrelu_with_noise_functional(self, noise, lower, upper, training, gen);
    return self.copy_(result);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("multinomial", multinomial);
    m.impl("multinomial.out", multinomial_out);
    m.impl("poisson", poisson);
    m.impl("rrelu_with_noise", rrelu_with_noise_functional);
    m.impl("rrelu_with_noise.out", rrelu_with_noise_out);
    m.impl("rrelu_with_noise_", rrelu_with_noise_);
}

}  // namespace trnsim::neuron
