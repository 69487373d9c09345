// Building blocks shared by the pointwise kernel files (src/ops/pointwise*.cpp): compositions
// over SBUF views of one tile, and the HBM-to-HBM copy of an iteration space.
// Internal to src/ops.
#pragma once
#include <functional>

#include "trnsim/tiling.h"

namespace trnsim::ops::pointwise_detail {

// dst = exp(x) - 1, accurate near 0 (Kahan: (u - 1) x / log u with u = exp x; x where u == 1,
// u - 1 where u is 0 or inf). t0..t2: fp32 scratch of x's shape, none of them x; dst may be t2.
void emit_expm1(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& t0,
                const AccessPattern& t1, const AccessPattern& t2);
// dst = log(1 + x), accurate near 0 (Goldberg: log u * x / (u - 1) with u = 1 + x; x where
// u == 1, log u where u = inf). Same scratch rules as emit_expm1.
void emit_log1p(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& x, const AccessPattern& t0,
                const AccessPattern& t1, const AccessPattern& t2);

// Operand 0 of s <- operand 1 of s, HBM to HBM: one DMA per piece, pieces sized so that every DMA
// queue gets work. s is simplified; out/in give each operand's argument and dtype.
void copy_space(KernelBuilder& kb, const tiling::IterSpace& s, const TensorDesc& out, const TensorDesc& in);

// out <- a constant: 'write_constant' writes it into one SBUF tile view (as large as the largest
// piece of out), which is then stored to every piece of out. 'op' names the kernel in errors.
void fill_space(KernelBuilder& kb, const char* op, const TensorDesc& out,
                const std::function<void(const AccessPattern& tile)>& write_constant);

}  // namespace trnsim::ops::pointwise_detail
