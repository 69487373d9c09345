// The NeuronCore instruction set: access patterns, instructions, programs.
//
// The opcode list itself lives in instructions.def; everything here is the
// data an instruction carries. Memory model (hardware.md 1.4):
//   * SBUF and PSUM are 2-D: a partition dimension (spatial, <= 128 lanes) and a
//     per-partition byte address space (the free dimension, up to 4 strided dims).
//   * HBM is a flat byte address space of the NeuronCore's share of device memory.
// Engines run their own instruction streams ("queues") concurrently; ordering
// between queues exists only through semaphores (see SemWait / signal).
#pragma once
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "trnsim/dtype.h"

namespace trnsim {

struct ChipConfig;

// ---------------------------------------------------------------- engines and queues
enum class Engine : uint8_t { Tensor, Vector, Scalar, GpSimd, Sync, DMA };
constexpr uint32_t ENG_TENSOR = 1u << 0;
constexpr uint32_t ENG_VECTOR = 1u << 1;
constexpr uint32_t ENG_SCALAR = 1u << 2;
constexpr uint32_t ENG_GPSIMD = 1u << 3;
constexpr uint32_t ENG_SYNC = 1u << 4;
constexpr uint32_t ENG_DMA = 1u << 5;
constexpr uint32_t ENG_ANY = 0x3f;
const char* engine_name(Engine e);

// Queue numbering, per physical core: the five compute/sequencer engines, then the DMA queues.
// A logical NeuronCore groups up to kMaxPhysicalCores physical cores (LNC), each with its own
// engines, queues, SBUF and PSUM; physical core c's queues are numbered from c x kQueuesPerCore.
constexpr uint32_t kNumEngineQueues = 5;       // Tensor, Vector, Scalar, GpSimd, Sync
constexpr uint32_t kQueuesPerCore = 32;
constexpr uint32_t kMaxDmaQueues = kQueuesPerCore - kNumEngineQueues;   // 27; every preset has 16
constexpr uint32_t kMaxPhysicalCores = 2;
constexpr uint32_t kMaxQueues = kQueuesPerCore * kMaxPhysicalCores;
constexpr uint32_t queue_core(uint32_t q) { return q / kQueuesPerCore; }    // physical core of a queue
constexpr uint32_t queue_local(uint32_t q) { return q % kQueuesPerCore; }   // its number within the core
// Semaphores [0, kMaxQueues) count completed instructions of each queue and are
// incremented by the hardware; user semaphores start at kUserSemBase and are
// incremented only by an instruction's 'signal'.
constexpr uint32_t kUserSemBase = 64;
constexpr uint32_t kMaxSemaphores = 256;

// ---------------------------------------------------------------- enums
enum class Opcode : uint8_t {
#define ISA_INSTR(name, ...) name,
#include "trnsim/instructions.def"
#undef ISA_INSTR
    count_,
};

enum class MemSpace : uint8_t { HBM, SBUF, PSUM };

enum class ActFunc : uint8_t {
    identity, exp, log, tanh, sigmoid, gelu, gelu_tanh, silu, relu, rsqrt, sqrt, square, reciprocal,
    abs, neg, sin, cos, erf, softplus, sign,
    gelu_dx, gelu_tanh_dx, silu_dx,   // derivatives, for backward passes
    count_
};

enum class AluOp : uint8_t {
    bypass,  // no operation: returns the left operand
    add, sub, mul, div, max, min, pow, mod,
    eq, ne, lt, le, gt, ge,                      // comparisons give 1.0 or 0.0
    logical_and, logical_or, logical_xor,        // on truthiness, give 1.0 or 0.0
    bitwise_and, bitwise_or, bitwise_xor,        // on int32 values
    abs_max, count_
};

enum class ReduceOp : uint8_t { none, add, max, min, count_ };

// Operations of the GpSimd's integer instructions (int_alu, int_reduce, int_scan), computed
// exactly on two's-complement integers of up to 64 bits (docs/integers.md). Binary ops read
// src0 and src1 (or imm_int); unary ops src0 only; select reads src0 (the mask), src1, src2.
enum class IntOp : uint8_t {
    add, sub, mul,
    div_trunc, div_floor, remainder, fmod,      // divide by zero raises
    max, min,
    eq, ne, lt, le, gt, ge,                     // give 1 or 0
    bit_and, bit_or, bit_xor, shl, shr,         // shr is arithmetic (sign-propagating)
    logical_and, logical_or, logical_xor,       // on nonzero-ness, give 1 or 0
    copy, neg, abs, bit_not, logical_not, sign, // unary; copy casts (wraps like a C++ integer cast)
    select,                                     // src0 != 0 ? src1 : src2
    argmax, argmin,                             // int_reduce only: index of the first extreme
    count_
};

const char* opcode_name(Opcode op);
const char* act_func_name(ActFunc f);
const char* alu_op_name(AluOp op);
const char* reduce_op_name(ReduceOp op);
const char* int_op_name(IntOp op);
const char* mem_space_name(MemSpace s);

// ---------------------------------------------------------------- the operand model
// Every instruction names its operands by slot; instructions.def declares, per opcode, which
// slots it uses, whether each is read, written or both, the flag that enables an optional slot,
// and the memories the slot may reach. Validation, hazard tracking, relocation, the
// disassembler, the cost model's access overheads and the timing model's port and PSUM
// bookkeeping all walk that one declaration (for_each_operand), never a per-opcode list.
enum class OperandSlot : uint8_t { dst, src0, src1, src2, acc, count_ };
const char* operand_slot_name(OperandSlot s);

constexpr uint32_t MEM_HBM = 1u << 0;
constexpr uint32_t MEM_SBUF = 1u << 1;
constexpr uint32_t MEM_PSUM = 1u << 2;
constexpr uint32_t MEM_ONCHIP = MEM_SBUF | MEM_PSUM;
constexpr uint32_t mem_bit(MemSpace s) { return 1u << static_cast<uint32_t>(s); }

// When a slot is read or written: never (0), always, when the instruction has a reduce op, or
// when any of the given F_* flag bits is set.
constexpr uint32_t WHEN_NEVER = 0;
constexpr uint32_t WHEN_ALWAYS = 1u << 31;
constexpr uint32_t WHEN_REDUCE = 1u << 30;

struct OperandInfo {
    OperandSlot slot;
    uint32_t reads_when;    // WHEN_* or F_* bits
    uint32_t writes_when;
    uint32_t memories;      // MEM_* bits the slot may reach (engines narrow it further)
    const char* role;       // what the operand is ("stationary", "indices"), "" for plain data
};

// Useful work the profiler counts (instruction_flops).
enum class WorkKind : uint8_t {
    none,             // data movement, barriers
    matmul,           // 2*K*M*N
    per_output,       // one operation per output element
    per_output_stage, // one per output element and ALU stage (tensor_scalar's two ops)
    per_input,        // one comparison or reduction step per input element
};

// The cost formula family (cost_model.cpp); compute_cost_ps and dma_cost switch over it.
enum class CostKind : uint8_t {
    none,            // barriers: no engine time
    dma_copy,        // fixed latency + bytes at the descriptor-efficiency-scaled queue rate
    dma_transpose,   // the DMA element shuffle at its published fraction of the queue rate
    dma_indirect,    // one descriptor per table row (gather / scatter-add)
    matmul,          // TensorE: max(N_moving, MM_INIT) x fp32 passes / fp8 speedup
    transpose,       // TensorE: max(P, min(64, F)); VectorE: like `stream`
    stream,          // max(MIN_II, N)
    stream_two_input,  // two tensor inputs: 2N (N from PSUM or for fast bf16), divide rate
    stream_alu,      // one input through the ALU stages: bf16 fast mode, divide rate
    stream_reduce,   // N over the reduced input, halved for 2-byte add/max
    stream_fill,     // memset: halved for 2-byte zero fills
    stream_two_pass, // select, tensor_tensor_scan: 2N
    stream_data,     // max8, nc_find_index8: N, no MIN_II floor
    stream_aggregate,  // bn_aggr: 13 cycles per (count, mean, M2) triple, MIN_II floor
    int_words,       // GpSimd integer instructions: N x the 32-bit word operations per element
};

constexpr int kMaxOperandSlots = static_cast<int>(OperandSlot::count_);

struct OpcodeInfo {
    const char* name;
    uint32_t engines;     // ENG_* mask
    WorkKind work;
    CostKind cost;
    const char* summary;
    int num_operands;
    std::array<OperandInfo, kMaxOperandSlots> operands;

    // The declaration of slot s, or nullptr if the opcode has no such operand.
    const OperandInfo* operand(OperandSlot s) const;
    bool reads(OperandSlot s) const;   // may read slot s (under some condition)
};
const OpcodeInfo& opcode_info(Opcode op);

// ---------------------------------------------------------------- access patterns
// An N-D view [partitions, size[0], ..., size[ndim-1]] of one memory.
//   SBUF/PSUM: element (p, i..) lives in partition start_partition + p at byte
//              offset + (sum_k i_k * stride[k]) * dtype_size within that partition.
//   HBM:       element (p, i..) lives at byte offset + (p * partition_stride +
//              sum_k i_k * stride[k]) * dtype_size.
// Strides are in elements and may be zero (broadcast) or negative.
constexpr int kMaxFreeDims = 4;
struct AccessPattern {
    MemSpace space = MemSpace::SBUF;
    DType dtype = DType::f32;
    uint8_t ndim = 1;
    // HBM only: 0 = 'offset' is an absolute address; k >= 1 = 'offset' is relative to the
    // base address of launch argument k-1 (relocatable programs, cached per shape).
    uint8_t arg = 0;
    uint16_t start_partition = 0;
    uint16_t partitions = 1;
    uint64_t offset = 0;
    int64_t partition_stride = 0;                 // HBM only
    std::array<uint32_t, kMaxFreeDims> size{1, 1, 1, 1};
    std::array<int64_t, kMaxFreeDims> stride{1, 0, 0, 0};

    uint64_t free_elems() const;                  // product of size[0..ndim)
    uint64_t elems() const { return free_elems() * partitions; }
    uint64_t bytes() const { return elems() * dtype_size(dtype); }
    // Bytes of the longest contiguous run (what one DMA descriptor moves).
    uint64_t contiguous_bytes() const;
    bool valid() const { return partitions > 0; }

    // Byte range [lo, hi) the pattern can touch, relative to its memory's origin (per partition
    // for SBUF/PSUM; the partition stride included for HBM). Computed in 128 bits, so that no
    // offset, stride or size, corrupt or not, overflows it.
    __extension__ typedef __int128 WideInt;
    struct ByteExtent {
        WideInt lo, hi;
    };
    ByteExtent byte_extent() const;
    // Whether the two patterns may touch a common byte: same memory, overlapping partitions
    // (SBUF/PSUM) and overlapping byte extents. Conservative: strides are not intersected.
    bool may_overlap(const AccessPattern& other) const;
};

// Builders for the common shapes.
AccessPattern sbuf_ap(uint16_t start_partition, uint16_t partitions, uint64_t offset, DType dt,
                      std::initializer_list<uint32_t> free_sizes);           // contiguous free dims
AccessPattern psum_ap(uint16_t start_partition, uint16_t partitions, uint64_t offset, DType dt,
                      std::initializer_list<uint32_t> free_sizes);
// rows x cols row-major matrix at addr with leading dimension ld (elements); rows map to partitions.
AccessPattern hbm_matrix_ap(uint64_t addr, DType dt, uint32_t rows, uint32_t cols, int64_t ld);

std::string format_ap(const AccessPattern& ap);

// ---------------------------------------------------------------- instructions
struct SemWait {
    uint16_t sem = 0;
    uint32_t value = 0;   // proceed once semaphore 'sem' >= value
};

// value(p, i0..i3) = base + partition_mul * p + sum_k free_mul[k] * i_k
struct Affine {
    int32_t base = 0;
    int32_t partition_mul = 0;
    std::array<int32_t, kMaxFreeDims> free_mul{0, 0, 0, 0};
};

constexpr uint32_t F_ACCUMULATE = 1u << 0;  // nc_matmul: add into PSUM instead of overwrite
constexpr uint32_t F_SCALE_AP = 1u << 1;    // activation: scale from src1
constexpr uint32_t F_BIAS_AP = 1u << 2;     // activation: bias from src2
constexpr uint32_t F_S0_AP = 1u << 1;       // tensor_scalar: s0 from src1 (same bit as F_SCALE_AP)
constexpr uint32_t F_S1_AP = 1u << 2;       // tensor_scalar: s1 from src2; select: else-branch from src2
constexpr uint32_t F_REVERSE0 = 1u << 3;    // tensor_scalar: s0 alu0 data
constexpr uint32_t F_REVERSE1 = 1u << 4;    // tensor_scalar: s1 alu1 (...)
constexpr uint32_t F_ACC_OUT = 1u << 5;     // nc_match_replace8: also write the indices to acc
// Timing hint set by KernelBuilder: this instruction reads what the previous
// instruction of its own queue wrote (pays the dependent-instruction turnaround).
constexpr uint32_t F_DEPENDS_ON_PREV = 1u << 8;

constexpr int kMaxWaits = 6;

struct Instruction {
    Opcode op = Opcode::barrier;
    Engine engine = Engine::Sync;
    uint8_t dma_queue = 0;          // for Engine::DMA
    uint8_t core = 0;               // physical core of the logical core that runs it (SPMD, LNC > 1)
    ActFunc func = ActFunc::identity;
    AluOp alu0 = AluOp::bypass;
    AluOp alu1 = AluOp::bypass;
    ReduceOp reduce = ReduceOp::none;
    uint8_t reduce_ndim = 1;        // tensor_reduce: innermost free dims reduced
    uint8_t num_waits = 0;
    uint32_t flags = 0;
    int16_t signal = -1;            // user semaphore incremented when this instruction completes
    uint32_t tag = 0;               // caller's label (op / module id for the profiler)
    float imm0 = 0, imm1 = 0;
    IntOp iop = IntOp::copy;        // int_alu / int_reduce / int_scan
    int64_t imm_int = 0;            // int_alu: src1's value when F_S0_AP is clear; int_scan: initial value
    Affine affine;
    AccessPattern dst, src0, src1, src2, acc;
    std::array<SemWait, kMaxWaits> waits{};

    uint32_t queue() const {        // the instruction stream this instruction belongs to
        return core * kQueuesPerCore +
               (engine == Engine::DMA ? kNumEngineQueues + dma_queue : static_cast<uint32_t>(engine));
    }
};

struct IsaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Checks every operand against the hardware rules of 'chip' (partitions <= 128,
// start-partition alignment, SBUF/PSUM bounds, PSUM bank limits, dtype support
// per engine, engine allowed for the opcode, matching shapes...). Throws IsaError
// "<opcode>: <rule broken>" naming the instruction and the rule.
void validate(const Instruction& ins, const ChipConfig& chip, uint64_t hbm_bytes);

// A straight-line program for one logical NeuronCore: the instructions of each of its physical
// cores (Instruction::core), in an order in which every semaphore wait refers to
// signals/completions earlier in the list. A wait on another physical core's queue is a remote
// semaphore (ChipConfig::remote_sem_latency_ns).
struct Program {
    std::string name;
    std::vector<Instruction> instrs;
    uint8_t cores = 1;                    // physical cores it uses: 1 + the largest Instruction::core
    std::vector<std::string> tag_names;   // optional names for Instruction::tag values
    bool prevalidated = false;            // set by KernelBuilder::finish(): run() skips validate()
    // Unique per finished kernel (KernelBuilder::finish), 0 for hand-built programs. A core
    // reuses the timing of a program it has run before; a program must not change after
    // it has an id.
    uint64_t id = 0;
    // Launch arguments (see AccessPattern::arg): bytes each one must provide from its base.
    std::vector<uint64_t> arg_extent;
    size_t num_args() const { return arg_extent.size(); }
};

// Fills prog.arg_extent from the program's HBM operands that use arguments.
void compute_arg_extents(Program& prog);

// Operand slots of an instruction (see OperandSlot).
const AccessPattern& operand(const Instruction& ins, OperandSlot s);
AccessPattern& operand(Instruction& ins, OperandSlot s);

// Whether the instruction, as configured by its flags and reduce op, reads / writes slot `d`.
bool operand_reads(const Instruction& ins, const OperandInfo& d);
bool operand_writes(const Instruction& ins, const OperandInfo& d);

// Calls f(const OperandInfo&, const AccessPattern&) for every operand the instruction uses
// (reads or writes), in declaration order. The opcode must be valid.
template <typename F>
void for_each_operand(const Instruction& ins, F&& f) {
    const OpcodeInfo& info = opcode_info(ins.op);
    for (int i = 0; i < info.num_operands; ++i) {
        const OperandInfo& d = info.operands[i];
        if (operand_reads(ins, d) || operand_writes(ins, d)) f(d, operand(ins, d.slot));
    }
}
// Calls f(AccessPattern&) for every operand slot the opcode declares, used or not (relocation).
template <typename F>
void for_each_declared_operand(Instruction& ins, F&& f) {
    const OpcodeInfo& info = opcode_info(ins.op);
    for (int i = 0; i < info.num_operands; ++i) f(operand(ins, info.operands[i].slot));
}

// Whether the instruction writes its second destination 'acc' (a reduction result or indices).
bool writes_acc(const Instruction& ins);

std::string disassemble(const Instruction& ins);
std::string disassemble(const Program& prog);

// Useful work of an instruction, for the profiler.
uint64_t instruction_flops(const Instruction& ins);   // 2*K*M*N for nc_matmul, elements for others
uint64_t instruction_hbm_bytes(const Instruction& ins);  // bytes read from + written to HBM

}  // namespace trnsim
