// iota: dst[p, i..] = affine(p, i..) as a number of dst's dtype. Integer
// destinations get the exact value (int32 wrap-around), floats the rounded one.
#include <cstring>

#include "exec_common.h"

namespace trnsim {

void exec_iota(CoreMemory& mem, const Instruction& ins) {
    const AccessPattern& dst = ins.dst;
    const size_t n = dst.elems();
    thread_local std::vector<int64_t> values;
    values.resize(n);
    exec::affine_values(ins.affine, dst, values.data());
    if (dst.dtype == DType::i32) {
        const uint64_t free = dst.free_elems();
        for (size_t e = 0; e < n; ++e) {
            const int32_t v = static_cast<int32_t>(values[e]);
            std::memcpy(mem.element(dst, static_cast<uint32_t>(e / free), e % free), &v, 4);
        }
        return;
    }
    float* out = exec::scratch(exec::kScratchA, n);
    for (size_t e = 0; e < n; ++e) out[e] = static_cast<float>(values[e]);
    mem.store_f32(dst, out);
}

}  // namespace trnsim
