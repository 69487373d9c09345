// Pointwise math composed of ScalarE activations and engine ALU ops: rounding, log1p, expm1,
// lerp, addcmul / addcdiv and clamp with tensor bounds. Every intermediate is an fp32 scratch
// tile; only the last instruction writes the output's dtype. The ALU-only steps of the longer
// compositions run on the ScalarE's ALU stages, so that the two engines share the work.
#include <cmath>
#include <limits>

#include "pointwise_common.h"
#include "trnsim/ops.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

constexpr float kTwo23 = 8388608.0f;   // from 2^23 on every float is an integer
constexpr float kTwo24 = 16777216.0f;
constexpr float kInf = std::numeric_limits<float>::infinity();

using Views = std::vector<AccessPattern>;

// y = trunc(x), signed zero kept: sign(x) * (a - fmod(min(a, 2^24), 1)) with a = |x|; the min
// keeps fmod finite for a = inf. t[0..1] scratch; y may be t[1].
void emit_trunc(KernelBuilder& kb, const AccessPattern& y, const AccessPattern& x, const Views& t) {
    kb.activation(t[0], x, ActFunc::abs);
    kb.tensor_scalar(t[1], t[0], AluOp::min, kTwo24, AluOp::mod, 1.0f, Engine::Scalar);
    kb.tensor_tensor(t[1], t[0], t[1], AluOp::sub);
    kb.activation(t[0], x, ActFunc::sign);
    kb.tensor_tensor(y, t[1], t[0], AluOp::mul);
}

// y = round half to even: sign(x) * r, r = (a + 2^23) - 2^23 for a = |x| < 2^23, else a.
void emit_round(KernelBuilder& kb, const AccessPattern& y, const AccessPattern& x, const Views& t) {
    kb.activation(t[0], x, ActFunc::abs);
    kb.tensor_scalar(t[1], t[0], AluOp::add, kTwo23, AluOp::sub, kTwo23, Engine::Scalar);
    kb.tensor_scalar(t[2], t[0], AluOp::lt, kTwo23);
    kb.select(t[1], t[2], t[1], t[0]);
    kb.activation(t[0], x, ActFunc::sign);
    kb.tensor_tensor(y, t[1], t[0], AluOp::mul);
}

void emit_rounding(KernelBuilder& kb, Rounding mode, const AccessPattern& y, const AccessPattern& x, const Views& t) {
    switch (mode) {
        case Rounding::trunc: emit_trunc(kb, y, x, t); return;
        case Rounding::round: emit_round(kb, y, x, t); return;
        case Rounding::floor:
        case Rounding::ceil: {
            // From trunc: floor = x < t ? t - 1 : t, ceil = x > t ? t + 1 : t (t keeps its signed zero).
            const bool floor = mode == Rounding::floor;
            emit_trunc(kb, t[1], x, t);
            kb.tensor_tensor(t[0], x, t[1], floor ? AluOp::lt : AluOp::gt);
            kb.tensor_scalar(t[2], t[1], AluOp::add, floor ? -1.0f : 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
            kb.select(y, t[0], t[2], t[1]);
            return;
        }
    }
    throw OpError("round_values: unknown mode " + std::to_string(static_cast<int>(mode)));
}

}  // namespace

namespace pointwise_detail {

void emit_expm1(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& t0,
                const AccessPattern& t1, const AccessPattern& t2) {
    kb.activation(t0, x, ActFunc::exp);                                   // u
    kb.activation(t1, t0, ActFunc::log);                                  // log u
    kb.tensor_scalar(t0, t0, AluOp::sub, 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);   // u - 1
    kb.tensor_tensor(t2, t0, t1, AluOp::div);
    kb.tensor_tensor(t2, t2, x, AluOp::mul);
    // |x| > 17: u - 1 itself, as accurate as exp (-1 below -17.3, inf above 88.7; and no log of a
    // denormal u)
    kb.tensor_scalar(t1, x, AluOp::abs_max, 0.0f, AluOp::gt, 17.0f);
    kb.select(t2, t1, t0, t2);
    kb.tensor_scalar(t1, t0, AluOp::eq, 0.0f);                           // u == 1: x
    kb.select(dst, t1, x, t2);
}

void emit_log1p(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& t0,
                const AccessPattern& t1, const AccessPattern& t2) {
    kb.tensor_scalar(t0, x, AluOp::add, 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);   // u
    kb.activation(t1, t0, ActFunc::log);                                                // log u
    kb.tensor_scalar(t0, t0, AluOp::sub, 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);   // u - 1, exact
    kb.tensor_tensor(t2, x, t0, AluOp::div);
    kb.tensor_tensor(t2, t2, t1, AluOp::mul);
    kb.tensor_scalar(t0, t0, AluOp::eq, 0.0f);                                         // u == 1: x
    kb.select(t2, t0, x, t2);
    kb.tensor_scalar(t0, t1, AluOp::eq, kInf);                                         // u = inf: inf
    kb.select(dst, t0, t1, t2);
}

}  // namespace pointwise_detail

void round_values(KernelBuilder& kb, Rounding mode, const TensorDesc& out, const TensorDesc& in, int64_t decimals) {
    if (!is_float(out.dtype) || !is_float(in.dtype)) fail("round", "float tensors only, got " + in.str());
    if (decimals != 0 && mode != Rounding::round) fail("round", "decimals apply to round only");
    if (decimals == 0) {
        run_elementwise(kb, "round", out, {&in}, 3, [&](auto& x, auto& y, auto& t) { emit_rounding(kb, mode, y, x[0], t); });
        return;
    }
    // As PyTorch: the power of ten in fp32, applied by multiplying or dividing.
    const float p = static_cast<float>(std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals)));
    const AluOp pre = decimals > 0 ? AluOp::mul : AluOp::div, post = decimals > 0 ? AluOp::div : AluOp::mul;
    run_elementwise(kb, "round_decimals", out, {&in}, 4, [&](auto& x, auto& y, auto& t) {
        kb.tensor_scalar(t[3], x[0], pre, p);
        emit_round(kb, t[3], t[3], t);
        kb.tensor_scalar(y, t[3], post, p);
    });
}

void log1p(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in) {
    run_elementwise(kb, "log1p", out, {&in}, 3, [&](auto& x, auto& y, auto& t) {
        pointwise_detail::emit_log1p(kb, y, x[0], t[0], t[1], t[2]);
    });
}

void math_fn(KernelBuilder& kb, MathFn op, const TensorDesc& out, const TensorDesc& in) {
    if (!is_float(out.dtype) || !is_float(in.dtype)) fail("math_fn", "float tensors only, got " + in.str());
    constexpr float kLn2 = 0.693147180559945309f;
    run_elementwise(kb, "math_fn", out, {&in}, 2, [&](auto& x, auto& y, auto& t) {
        switch (op) {
            case MathFn::frac:
                emit_trunc(kb, t[1], x[0], t);
                kb.tensor_tensor(y, x[0], t[1], AluOp::sub);
                return;
            case MathFn::log2:
            case MathFn::log10:
                kb.activation(t[0], x[0], ActFunc::log);
                kb.tensor_scalar(y, t[0], AluOp::div, op == MathFn::log2 ? kLn2 : 2.30258509299404568f);
                return;
            case MathFn::exp2: kb.activation(y, x[0], ActFunc::exp, kLn2); return;
        }
        throw OpError("math_fn: unknown op " + std::to_string(static_cast<int>(op)));
    });
}

void logit_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& x,
                    std::optional<float> eps) {
    const float lo = eps ? *eps : 0.0f, hi = eps ? 1.0f - *eps : 1.0f;
    const float outside = eps ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    run_elementwise(kb, "logit_backward", grad_in, {&grad_out, &x}, 3, [&](auto& in, auto& y, auto& t) {
        kb.tensor_scalar(t[0], in[1], AluOp::mul, -1.0f, AluOp::add, 1.0f, Engine::Scalar);
        kb.tensor_tensor(t[0], in[1], t[0], AluOp::mul);
        kb.tensor_tensor(t[0], in[0], t[0], AluOp::div);                   // g / (x (1 - x))
        kb.tensor_scalar(t[1], in[1], AluOp::lt, lo, AluOp::bypass, 0.0f, Engine::Scalar);
        kb.tensor_scalar(t[2], in[1], AluOp::gt, hi);
        kb.tensor_tensor(t[1], t[1], t[2], AluOp::max);                    // outside (NaN x is not)
        kb.tensor_scalar(t[1], t[1], AluOp::eq, 0.0f);
        select_imm(kb, y, t[1], t[0], outside);
    });
}

void sgn(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in) {
    run_elementwise(kb, "sgn", out, {&in}, 2, [&](auto& x, auto& y, auto& t) {
        kb.tensor_scalar(t[0], x[0], AluOp::gt, 0.0f, AluOp::bypass, 0.0f, Engine::Scalar);
        kb.tensor_scalar(t[1], x[0], AluOp::lt, 0.0f);
        kb.tensor_tensor(y, t[0], t[1], AluOp::sub);
    });
}

void logit(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::optional<float> eps) {
    run_elementwise(kb, "logit", out, {&in}, 2, [&](auto& x, auto& y, auto& t) {
        AccessPattern z = x[0];
        if (eps) {
            kb.tensor_scalar(t[0], x[0], AluOp::max, *eps, AluOp::min, 1.0f - *eps, Engine::Scalar);
            z = t[0];
        }
        kb.tensor_scalar(t[1], z, AluOp::mul, -1.0f, AluOp::add, 1.0f, Engine::Scalar);
        kb.tensor_tensor(t[1], z, t[1], AluOp::div);
        kb.activation(y, t[1], ActFunc::log);
    });
}

void expm1(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in) {
    run_elementwise(kb, "expm1", out, {&in}, 3, [&](auto& x, auto& y, auto& t) {
        pointwise_detail::emit_expm1(kb, y, x[0], t[0], t[1], t[2]);
    });
}

void lerp(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& end,
          const TensorDesc* weight, float w) {
    if (!weight) {
        const bool small = std::fabs(w) < 0.5f;
        run_elementwise(kb, "lerp", out, {&self, &end}, 1, [&](auto& x, auto& y, auto& t) {
            kb.tensor_tensor(t[0], x[1], x[0], AluOp::sub);
            if (small) {
                kb.tensor_scalar(t[0], t[0], AluOp::mul, w);
                kb.tensor_tensor(y, x[0], t[0], AluOp::add);
            } else {
                kb.tensor_scalar(t[0], t[0], AluOp::mul, 1.0f - w);
                kb.tensor_tensor(y, x[1], t[0], AluOp::sub);
            }
        });
        return;
    }
    run_elementwise(kb, "lerp_tensor", out, {&self, &end, weight}, 3, [&](auto& x, auto& y, auto& t) {
        kb.tensor_tensor(t[0], x[1], x[0], AluOp::sub);                       // d = end - self
        kb.tensor_tensor(t[1], t[0], x[2], AluOp::mul);
        kb.tensor_tensor(t[1], x[0], t[1], AluOp::add);                       // self + w d
        kb.tensor_scalar(t[2], x[2], AluOp::mul, -1.0f, AluOp::add, 1.0f, Engine::Scalar);
        kb.tensor_tensor(t[2], t[0], t[2], AluOp::mul);
        kb.tensor_tensor(t[2], x[1], t[2], AluOp::sub);                       // end - d (1 - w)
        kb.tensor_scalar(t[0], x[2], AluOp::abs_max, 0.0f, AluOp::lt, 0.5f, Engine::Scalar);
        kb.select(y, t[0], t[1], t[2]);
    });
}

void addcmul(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& t1,
             const TensorDesc& t2, float value, bool divide) {
    run_elementwise(kb, divide ? "addcdiv" : "addcmul", out, {&self, &t1, &t2}, 1, [&](auto& x, auto& y, auto& t) {
        kb.tensor_scalar(t[0], x[1], AluOp::mul, value, AluOp::bypass, 0.0f, Engine::Scalar);
        kb.tensor_tensor(t[0], t[0], x[2], divide ? AluOp::div : AluOp::mul);
        kb.tensor_tensor(y, x[0], t[0], AluOp::add);
    });
}

void clamp_tensor(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc* lo,
                  const TensorDesc* hi) {
    if (lo && hi) {
        run_elementwise(kb, "clamp_tensor", out, {&in, lo, hi}, 1, [&](auto& x, auto& y, auto& t) {
            kb.tensor_tensor(t[0], x[0], x[1], AluOp::max);
            kb.tensor_tensor(y, t[0], x[2], AluOp::min);
        });
    } else if (lo || hi) {
        run_elementwise(kb, lo ? "clamp_min_tensor" : "clamp_max_tensor", out, {&in, lo ? lo : hi}, 0,
                        [&](auto& x, auto& y, auto&) { kb.tensor_tensor(y, x[0], x[1], lo ? AluOp::max : AluOp::min); });
    } else {
        fail("clamp", "at least one of the bounds must be given");
    }
}

}  // namespace trnsim::ops
