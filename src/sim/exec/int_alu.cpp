// int_alu: dst = src0 iop src1 (or imm_int), unary iops on src0, select (src1 or src2 may be
// imm_int); exact integers computed
// in 64 bits (int_common.h). Division by zero raises, as PyTorch's integer division does.
#include "int_common.h"

namespace trnsim {
namespace {

[[noreturn]] void divide_by_zero(const Instruction& ins) { exec::fail(ins, "ZeroDivisionError (integer division by zero)"); }

int64_t binary(const Instruction& ins, IntOp op, int64_t a, int64_t b) {
    using namespace exec;
    switch (op) {
        case IntOp::add: return wrap_add(a, b);
        case IntOp::sub: return wrap_sub(a, b);
        case IntOp::mul: return wrap_mul(a, b);
        case IntOp::div_trunc:
        case IntOp::div_floor: {
            if (b == 0) divide_by_zero(ins);
            if (b == -1) return wrap_sub(0, a);   // INT64_MIN / -1 wraps
            int64_t q = a / b;
            if (op == IntOp::div_floor && a % b != 0 && ((a < 0) != (b < 0))) --q;
            return q;
        }
        case IntOp::remainder:
        case IntOp::fmod: {
            if (b == 0) divide_by_zero(ins);
            if (b == -1) return 0;
            int64_t r = a % b;
            if (op == IntOp::remainder && r != 0 && ((r < 0) != (b < 0))) r += b;
            return r;
        }
        case IntOp::max: return a > b ? a : b;
        case IntOp::min: return a < b ? a : b;
        case IntOp::eq: return a == b;
        case IntOp::ne: return a != b;
        case IntOp::lt: return a < b;
        case IntOp::le: return a <= b;
        case IntOp::gt: return a > b;
        case IntOp::ge: return a >= b;
        case IntOp::bit_and: return a & b;
        case IntOp::bit_or: return a | b;
        case IntOp::bit_xor: return a ^ b;
        // Shift counts outside [0, 64) shift every bit out (PyTorch's CPU kernels do the same at the
        // operands' width; the store to that width then gives the same bits).
        case IntOp::shl: return b < 0 || b >= 64 ? 0 : static_cast<int64_t>(static_cast<uint64_t>(a) << b);
        case IntOp::shr: return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;
        case IntOp::logical_and: return a != 0 && b != 0;
        case IntOp::logical_or: return a != 0 || b != 0;
        case IntOp::logical_xor: return (a != 0) != (b != 0);
        default: break;
    }
    exec::fail(ins, std::string("iop ") + int_op_name(op) + " is not a binary op");
}

int64_t unary(const Instruction& ins, IntOp op, int64_t a) {
    switch (op) {
        case IntOp::copy: return a;
        case IntOp::neg: return exec::wrap_sub(0, a);
        case IntOp::abs: return a < 0 ? exec::wrap_sub(0, a) : a;
        case IntOp::bit_not: return ~a;
        case IntOp::logical_not: return a == 0;
        case IntOp::sign: return (a > 0) - (a < 0);
        default: break;
    }
    exec::fail(ins, std::string("iop ") + int_op_name(op) + " is not a unary op");
}

bool is_unary(IntOp op) {
    return op == IntOp::copy || op == IntOp::neg || op == IntOp::abs || op == IntOp::bit_not ||
           op == IntOp::logical_not || op == IntOp::sign;
}

}  // namespace

void exec_int_alu(CoreMemory& mem, const Instruction& ins) {
    thread_local std::vector<int64_t> a, b, c;
    exec::load_ints(mem, ins.src0, a);
    const IntOp op = ins.iop;
    if (is_unary(op)) {
        for (int64_t& v : a) v = unary(ins, op, v);
    } else if (op == IntOp::select) {
        if (ins.flags & F_S0_AP) exec::load_ints(mem, ins.src1, b);
        else b.assign(a.size(), ins.imm_int);
        if (ins.flags & F_S1_AP) exec::load_ints(mem, ins.src2, c);
        else c.assign(a.size(), ins.imm_int);
        for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] != 0 ? b[i] : c[i];
    } else {
        if (ins.flags & F_S0_AP) exec::load_ints(mem, ins.src1, b);
        else b.assign(a.size(), ins.imm_int);
        for (size_t i = 0; i < a.size(); ++i) a[i] = binary(ins, op, a[i], b[i]);
    }
    exec::store_ints(mem, ins.dst, a);
}

}  // namespace trnsim
