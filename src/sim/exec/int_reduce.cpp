// int_reduce: dst = reduction of src0's innermost reduce_ndim free dims on exact integers
// (wrapping sums and products; argmax/argmin give the first extreme's index).
#include "int_common.h"

namespace trnsim {

void exec_int_reduce(CoreMemory& mem, const Instruction& ins) {
    thread_local std::vector<int64_t> in, out;
    exec::load_ints(mem, ins.src0, in);
    uint64_t R = 1;
    for (int k = ins.src0.ndim - ins.reduce_ndim; k < ins.src0.ndim; ++k) R *= ins.src0.size[k];
    const uint64_t groups = in.size() / R;
    out.resize(groups);
    const IntOp op = ins.iop;
    for (uint64_t g = 0; g < groups; ++g) {
        const int64_t* x = in.data() + g * R;
        int64_t r = x[0];
        int64_t at = 0;
        switch (op) {
            case IntOp::add: for (uint64_t i = 1; i < R; ++i) r = exec::wrap_add(r, x[i]); break;
            case IntOp::mul: for (uint64_t i = 1; i < R; ++i) r = exec::wrap_mul(r, x[i]); break;
            case IntOp::max: for (uint64_t i = 1; i < R; ++i) r = x[i] > r ? x[i] : r; break;
            case IntOp::min: for (uint64_t i = 1; i < R; ++i) r = x[i] < r ? x[i] : r; break;
            case IntOp::logical_and:
                r = 1;
                for (uint64_t i = 0; i < R; ++i) r = r && x[i] != 0;
                break;
            case IntOp::logical_or:
                r = 0;
                for (uint64_t i = 0; i < R; ++i) r = r || x[i] != 0;
                break;
            case IntOp::argmax:
            case IntOp::argmin:
                for (uint64_t i = 1; i < R; ++i)
                    if (op == IntOp::argmax ? x[i] > x[at] : x[i] < x[at]) at = static_cast<int64_t>(i);
                r = at;
                break;
            default: exec::fail(ins, std::string("iop ") + int_op_name(op) + " cannot reduce");
        }
        out[g] = r;
    }
    exec::store_ints(mem, ins.dst, out);
}

}  // namespace trnsim
