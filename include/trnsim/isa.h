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

// Queue numbering: the five compute/sequencer engines, then the DMA queues.
constexpr uint32_t kNumEngineQueues = 5;       // Tensor, Vector, Scalar, GpSimd, Sync
constexpr uint32_t kMaxDmaQueues = 32;
constexpr uint32_t kMaxQueues = kNumEngineQueues + kMaxDmaQueues;
// Semaphores [0, kMaxQueues) count completed instructions of each queue and are
// incremented by the hardware; user semaphores start at kUserSemBase and are
// incremented only by an instruction's 'signal'.
constexpr uint32_t kUserSemBase = 64;
constexpr uint32_t kMaxSemaphores = 256;

// ---------------------------------------------------------------- enums
enum class Opcode : uint8_t {
#define ISA_INSTR(name, engines, nsrc, writes_acc, summary) name,
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

const char* opcode_name(Opcode op);
const char* act_func_name(ActFunc f);
const char* alu_op_name(AluOp op);
const char* reduce_op_name(ReduceOp op);
const char* mem_space_name(MemSpace s);

struct OpcodeInfo {
    const char* name;
    uint32_t engines;     // ENG_* mask
    int nsrc;
    bool writes_acc;
    const char* summary;
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
    Affine affine;
    AccessPattern dst, src0, src1, src2, acc;
    std::array<SemWait, kMaxWaits> waits{};

    uint32_t queue() const {        // the instruction stream this instruction belongs to
        return engine == Engine::DMA ? kNumEngineQueues + dma_queue : static_cast<uint32_t>(engine);
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

// A straight-line program for one NeuronCore. Instructions appear in an order
// in which every semaphore wait refers to signals/completions earlier in the list.
struct Program {
    std::string name;
    std::vector<Instruction> instrs;
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

// Whether the instruction writes its second destination 'acc' (a reduction result or indices).
bool writes_acc(const Instruction& ins);

std::string disassemble(const Instruction& ins);
std::string disassemble(const Program& prog);

// Useful work of an instruction, for the profiler.
uint64_t instruction_flops(const Instruction& ins);   // 2*K*M*N for nc_matmul, elements for others
uint64_t instruction_hbm_bytes(const Instruction& ins);  // bytes read from + written to HBM

}  // namespace trnsim
