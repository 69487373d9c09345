// int_scan: per partition, r[i] = r[i-1] iop src0[i] along the free elements in row-major order
// (r[-1] = imm_int, or src1 [P,1] with F_S1_AP), on exact integers.
#include "int_common.h"

namespace trnsim {

void exec_int_scan(CoreMemory& mem, const Instruction& ins) {
    thread_local std::vector<int64_t> x, init;
    exec::load_ints(mem, ins.src0, x);
    const uint32_t P = ins.src0.partitions;
    if (ins.flags & F_S1_AP) exec::load_ints(mem, ins.src1, init);
    else init.assign(P, ins.imm_int);
    const uint64_t F = ins.src0.free_elems();
    for (uint32_t p = 0; p < P; ++p) {
        int64_t r = init[p];
        for (uint64_t i = 0; i < F; ++i) {
            int64_t& v = x[p * F + i];
            switch (ins.iop) {
                case IntOp::add: r = exec::wrap_add(r, v); break;
                case IntOp::mul: r = exec::wrap_mul(r, v); break;
                case IntOp::max: r = v > r ? v : r; break;
                case IntOp::min: r = v < r ? v : r; break;
                default: exec::fail(ins, std::string("iop ") + int_op_name(ins.iop) + " cannot scan");
            }
            v = r;
        }
    }
    exec::store_ints(mem, ins.dst, x);
}

}  // namespace trnsim
