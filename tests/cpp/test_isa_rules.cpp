// The operand checker (validate) and the work accounting of instructions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kHbmBytes = 1ull << 30;

// A trn2-like NeuronCore, built field by field.
ChipConfig trn2_like() {
    ChipConfig chip;
    chip.name = "test-trn2";
    chip.generation = 3;
    chip.sbuf.partitions = 128;
    chip.sbuf.bytes_per_partition = 192 * 1024;
    chip.psum.partitions = 128;
    chip.psum.bytes_per_partition = 16 * 1024;
    chip.psum.banks = 8;
    chip.dma.queues = 16;
    chip.tensor.rows = 128;
    chip.tensor.cols = 128;
    chip.tensor.moving_fmax = 512;
    return chip;
}

// The message validate() throws, or "" when the instruction passes.
std::string error_of(const Instruction& ins, const ChipConfig& chip = trn2_like(), uint64_t hbm = kHbmBytes) {
    try {
        validate(ins, chip, hbm);
    } catch (const IsaError& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_VALID(ins, ...) EXPECT_EQ(error_of(ins __VA_OPT__(, ) __VA_ARGS__), "")
// The message starts with the opcode and names the rule.
#define EXPECT_RULE(ins, opcode, keyword, ...) \
    EXPECT_THAT(error_of(ins __VA_OPT__(, ) __VA_ARGS__), AllOf(HasSubstr(std::string(opcode) + ": "), HasSubstr(keyword)))

// ---------------------------------------------------------------- one valid instance per opcode
Instruction dma_load() {
    Instruction ins;
    ins.op = Opcode::dma_copy;
    ins.engine = Engine::DMA;
    ins.dma_queue = 3;
    ins.dst = sbuf_ap(0, 128, 0, DType::bf16, {512});
    ins.src0 = hbm_matrix_ap(4096, DType::bf16, 128, 512, 1024);
    return ins;
}

Instruction matmul() {
    Instruction ins;
    ins.op = Opcode::nc_matmul;
    ins.engine = Engine::Tensor;
    ins.flags = F_ACCUMULATE;
    ins.dst = psum_ap(0, 128, 2048, DType::f32, {512});
    ins.src0 = sbuf_ap(0, 128, 0, DType::bf16, {128});
    ins.src1 = sbuf_ap(0, 128, 4096, DType::bf16, {512});
    return ins;
}

Instruction tensor_transpose() {
    Instruction ins;
    ins.op = Opcode::nc_transpose;
    ins.engine = Engine::Tensor;
    ins.src0 = sbuf_ap(0, 128, 0, DType::bf16, {64});
    ins.dst = psum_ap(0, 64, 0, DType::f32, {128});
    return ins;
}

Instruction vector_transpose() {
    Instruction ins;
    ins.op = Opcode::nc_transpose;
    ins.engine = Engine::Vector;
    ins.src0 = sbuf_ap(32, 32, 0, DType::f32, {16});
    ins.dst = sbuf_ap(0, 16, 1024, DType::f32, {32});
    return ins;
}

Instruction activation() {
    Instruction ins;
    ins.op = Opcode::activation;
    ins.engine = Engine::Scalar;
    ins.func = ActFunc::exp;
    ins.flags = F_SCALE_AP | F_BIAS_AP;
    ins.reduce = ReduceOp::add;
    ins.dst = sbuf_ap(0, 128, 0, DType::f32, {256});
    ins.src0 = psum_ap(0, 128, 0, DType::f32, {256});
    ins.src1 = sbuf_ap(0, 128, 8192, DType::f32, {1});
    ins.src2 = sbuf_ap(0, 128, 8196, DType::f32, {1});
    ins.acc = sbuf_ap(0, 128, 8200, DType::f32, {1});
    return ins;
}

Instruction tensor_tensor() {
    Instruction ins;
    ins.op = Opcode::tensor_tensor;
    ins.engine = Engine::Vector;
    ins.alu0 = AluOp::add;
    ins.dst = sbuf_ap(0, 128, 0, DType::bf16, {4, 64});
    ins.src0 = sbuf_ap(0, 128, 1024, DType::bf16, {256});
    ins.src1 = psum_ap(0, 128, 0, DType::f32, {256});
    return ins;
}

Instruction tensor_scalar() {
    Instruction ins;
    ins.op = Opcode::tensor_scalar;
    ins.engine = Engine::GpSimd;
    ins.alu0 = AluOp::mul;
    ins.alu1 = AluOp::add;
    ins.flags = F_S0_AP;
    ins.imm1 = 0.5f;
    ins.dst = sbuf_ap(64, 64, 0, DType::bf16, {100});
    ins.src0 = sbuf_ap(0, 64, 512, DType::bf16, {100});
    ins.src1 = sbuf_ap(0, 64, 1024, DType::f32, {1});
    return ins;
}

Instruction tensor_reduce() {
    Instruction ins;
    ins.op = Opcode::tensor_reduce;
    ins.engine = Engine::Vector;
    ins.reduce = ReduceOp::max;
    ins.reduce_ndim = 1;
    ins.src0 = sbuf_ap(0, 128, 0, DType::f32, {4, 64});
    ins.dst = sbuf_ap(0, 128, 2048, DType::f32, {4});
    return ins;
}

Instruction tensor_copy() {
    Instruction ins;
    ins.op = Opcode::tensor_copy;
    ins.engine = Engine::Scalar;
    ins.dst = sbuf_ap(0, 128, 0, DType::bf16, {512});
    ins.src0 = psum_ap(0, 128, 0, DType::f32, {512});
    return ins;
}

Instruction memset() {
    Instruction ins;
    ins.op = Opcode::memset;
    ins.engine = Engine::GpSimd;
    ins.imm0 = -1.0f;
    ins.dst = sbuf_ap(96, 32, 0, DType::f32, {8, 8});
    return ins;
}

Instruction iota() {
    Instruction ins;
    ins.op = Opcode::iota;
    ins.engine = Engine::GpSimd;
    ins.affine.base = 3;
    ins.affine.partition_mul = 1000;
    ins.affine.free_mul = {1, 0, 0, 0};
    ins.dst = sbuf_ap(0, 128, 0, DType::i32, {64});
    return ins;
}

Instruction affine_select() {
    Instruction ins;
    ins.op = Opcode::affine_select;
    ins.engine = Engine::GpSimd;
    ins.alu0 = AluOp::ge;
    ins.affine.partition_mul = 1;
    ins.affine.free_mul = {-1, 0, 0, 0};
    ins.imm0 = -3e38f;
    ins.dst = sbuf_ap(0, 128, 0, DType::f32, {128});
    ins.src0 = sbuf_ap(0, 128, 0, DType::f32, {128});
    return ins;
}

Instruction select() {
    Instruction ins;
    ins.op = Opcode::select;
    ins.engine = Engine::Vector;
    ins.flags = F_S1_AP;
    ins.dst = sbuf_ap(0, 128, 0, DType::f32, {32});
    ins.src0 = sbuf_ap(0, 128, 128, DType::u8, {32});
    ins.src1 = sbuf_ap(0, 128, 256, DType::f32, {32});
    ins.src2 = sbuf_ap(0, 128, 384, DType::f32, {32});
    return ins;
}

Instruction barrier() {
    Instruction ins;
    ins.op = Opcode::barrier;
    ins.engine = Engine::Sync;
    ins.num_waits = 2;
    ins.waits[0] = {5, 3};
    ins.waits[1] = {70, 1};
    ins.signal = 64;
    return ins;
}

TEST(IsaRules, ValidInstanceOfEveryOpcodePasses) {
    EXPECT_VALID(dma_load());
    EXPECT_VALID(matmul());
    EXPECT_VALID(tensor_transpose());
    EXPECT_VALID(vector_transpose());
    EXPECT_VALID(activation());
    EXPECT_VALID(tensor_tensor());
    EXPECT_VALID(tensor_scalar());
    EXPECT_VALID(tensor_reduce());
    EXPECT_VALID(tensor_copy());
    EXPECT_VALID(memset());
    EXPECT_VALID(iota());
    EXPECT_VALID(affine_select());
    EXPECT_VALID(select());
    EXPECT_VALID(barrier());
}

// ---------------------------------------------------------------- engines and queues
TEST(IsaRules, EngineMustBeAllowedForTheOpcode) {
    Instruction mm = matmul();
    mm.engine = Engine::Vector;
    EXPECT_RULE(mm, "nc_matmul", "engine vector not allowed (allowed: tensor)");

    Instruction dma = dma_load();
    dma.engine = Engine::GpSimd;
    EXPECT_RULE(dma, "dma_copy", "engine gpsimd not allowed");

    Instruction act = activation();
    act.engine = Engine::DMA;
    EXPECT_RULE(act, "activation", "engine dma not allowed");

    Instruction iot = iota();
    iot.engine = Engine::Vector;
    EXPECT_RULE(iot, "iota", "engine vector not allowed");
}

TEST(IsaRules, DmaQueueMustExistOnTheChip) {
    Instruction dma = dma_load();
    dma.dma_queue = 15;
    EXPECT_VALID(dma);
    dma.dma_queue = 16;
    EXPECT_RULE(dma, "dma_copy", "dma queue 16 out of range");

    Instruction wait_on_dma_queue = barrier();
    wait_on_dma_queue.engine = Engine::DMA;
    wait_on_dma_queue.dma_queue = 2;
    EXPECT_VALID(wait_on_dma_queue);
    wait_on_dma_queue.dma_queue = 31;
    EXPECT_RULE(wait_on_dma_queue, "barrier", "dma queue");
}

// ---------------------------------------------------------------- generic access-pattern rules
TEST(IsaRules, PartitionCountWithinPmax) {
    Instruction act = activation();
    act.src0.partitions = 129;
    EXPECT_EQ(error_of(act), "activation: src0 partitions 129 exceed 128 (pmax)");

    Instruction copy = tensor_copy();
    copy.dst.partitions = 0;
    EXPECT_RULE(copy, "tensor_copy", "dst partitions is 0");

    ChipConfig small = trn2_like();
    small.psum.partitions = 64;
    EXPECT_RULE(tensor_copy(), "tensor_copy", "src0 partitions 128 exceed 64 (pmax)", small);
}

TEST(IsaRules, HbmPartitionsAreUnlimited) {
    Instruction dma = dma_load();
    dma.dst = hbm_matrix_ap(0, DType::bf16, 4096, 16, 16);
    dma.src0 = sbuf_ap(0, 128, 0, DType::bf16, {512});
    EXPECT_VALID(dma);
}

TEST(IsaRules, NdimAndSizes) {
    Instruction copy = tensor_copy();
    copy.dst.ndim = 0;
    EXPECT_RULE(copy, "tensor_copy", "dst ndim 0 must be 1..4");
    copy.dst.ndim = 5;
    EXPECT_RULE(copy, "tensor_copy", "dst ndim 5");

    Instruction tt = tensor_tensor();
    tt.dst.size[1] = 0;
    EXPECT_RULE(tt, "tensor_tensor", "dst size[1] is 0");
}

TEST(IsaRules, StartPartitionPlusPartitionsWithinMemory) {
    Instruction dma = dma_load();
    dma.dst = sbuf_ap(100, 29, 0, DType::bf16, {512});
    dma.src0 = hbm_matrix_ap(0, DType::bf16, 29, 512, 512);
    EXPECT_RULE(dma, "dma_copy", "dst start_partition 100 + partitions 29 exceeds 128 sbuf partitions");
}

TEST(IsaRules, StartPartitionRuleForComputeEngines) {
    Instruction copy = tensor_copy();
    copy.dst = sbuf_ap(17, 40, 0, DType::f32, {16});
    copy.src0 = sbuf_ap(0, 40, 1024, DType::f32, {16});
    EXPECT_EQ(error_of(copy),
              "tensor_copy: dst start_partition 17 with 40 partitions must be 0 or 64 (start-partition rule)");
    copy.dst.start_partition = 64;
    EXPECT_VALID(copy);

    copy.dst = sbuf_ap(32, 65, 0, DType::f32, {16});
    copy.src0 = sbuf_ap(0, 65, 1024, DType::f32, {16});
    EXPECT_RULE(copy, "tensor_copy", "must be 0 (start-partition rule)");

    Instruction ms = memset();
    ms.dst = sbuf_ap(48, 16, 0, DType::f32, {8});
    EXPECT_RULE(ms, "memset", "must be a multiple of 32 (start-partition rule)");
    ms.dst.start_partition = 96;
    EXPECT_VALID(ms);
}

TEST(IsaRules, DmaAddressesAnyPartition) {
    Instruction dma = dma_load();
    dma.dst = sbuf_ap(17, 40, 0, DType::bf16, {512});
    dma.src0 = hbm_matrix_ap(0, DType::bf16, 40, 512, 512);
    EXPECT_VALID(dma);
}

TEST(IsaRules, BytesWithinThePartition) {
    Instruction ms = memset();
    ms.dst = sbuf_ap(0, 128, 192 * 1024 - 256, DType::f32, {64});
    EXPECT_VALID(ms);
    ms.dst.offset += 4;
    EXPECT_RULE(ms, "memset", "dst bytes [196356, 196612) out of bounds of sbuf [0, 196608) per partition");

    // A negative stride reads backwards from offset.
    ms.dst = sbuf_ap(0, 128, 252, DType::f32, {64});
    ms.dst.stride[0] = -1;
    EXPECT_VALID(ms);
    ms.dst.offset = 248;
    EXPECT_RULE(ms, "memset", "dst bytes [-4, 252) out of bounds");

    Instruction copy = tensor_copy();
    copy.src0.offset = 16 * 1024 - 1024;  // 512 f32 from here runs past PSUM's 16 KiB
    EXPECT_RULE(copy, "tensor_copy", "src0 bytes [15360, 17408) out of bounds of psum");

    // Outer dims count: 4 rows of 64 f32 with a row stride of 16384 elements.
    Instruction tt = tensor_tensor();
    tt.dst.dtype = DType::f32;
    tt.dst.stride[0] = 16384;
    EXPECT_RULE(tt, "tensor_tensor", "dst bytes [0, 196864) out of bounds");
}

TEST(IsaRules, HbmBytesWithinTheDevice) {
    Instruction dma = dma_load();
    EXPECT_VALID(dma, trn2_like(), 4096 + (127 * 1024 + 512) * 2);
    EXPECT_RULE(dma, "dma_copy", "src0 bytes [4096, 265216) out of bounds of hbm [0, 265215)", trn2_like(),
                4096 + (127 * 1024 + 512) * 2 - 1);

    dma.src0.partition_stride = -1024;  // rows walk down from the offset
    EXPECT_RULE(dma, "dma_copy", "src0 bytes [-256000, 5120) out of bounds of hbm");
}

TEST(IsaRules, OffsetAlignedToDtype) {
    Instruction copy = tensor_copy();
    copy.src0.offset = 2;
    EXPECT_RULE(copy, "tensor_copy", "src0 offset 2 not aligned to 4-byte f32 (alignment)");
    copy = tensor_copy();
    copy.dst.offset = 2;  // bf16 at byte 2 is aligned
    EXPECT_VALID(copy);
}

TEST(IsaRules, ComputeEnginesCannotAccessHbm) {
    Instruction copy = tensor_copy();
    copy.src0 = hbm_matrix_ap(0, DType::f32, 128, 512, 512);
    EXPECT_RULE(copy, "tensor_copy", "src0 in hbm: the scalar engine cannot access HBM");
}

// The GpSimd reaches SBUF only; the VectorE and the ScalarE read and write PSUM.
TEST(IsaRules, GpSimdCannotAccessPsum) {
    Instruction copy = tensor_copy();   // PSUM -> SBUF
    copy.engine = Engine::Vector;
    EXPECT_VALID(copy);
    copy.engine = Engine::GpSimd;
    EXPECT_RULE(copy, "tensor_copy", "src0 in psum: the gpsimd engine cannot access PSUM");
    std::swap(copy.dst, copy.src0);   // SBUF -> PSUM
    EXPECT_RULE(copy, "tensor_copy", "dst in psum: the gpsimd engine cannot access PSUM");
    copy.dst = sbuf_ap(0, 128, 4096, DType::f32, {512});
    EXPECT_VALID(copy);
}

TEST(IsaRules, PsumBankStraddle) {
    Instruction mm = matmul();
    mm.dst.offset = 1024;  // 512 f32 from byte 1024 crosses into the next 2 KiB bank
    EXPECT_RULE(mm, "nc_matmul", "dst bytes [1024, 3072) straddle a PSUM bank boundary (2048-byte banks)");

    Instruction tr = tensor_transpose();
    tr.dst.offset = 1792;
    EXPECT_RULE(tr, "nc_transpose", "straddle a PSUM bank boundary");

    // Other engines may read across banks.
    Instruction copy = tensor_copy();
    copy.src0 = psum_ap(0, 128, 1024, DType::f32, {512});
    EXPECT_VALID(copy);
}

// ---------------------------------------------------------------- dtypes
TEST(IsaRules, MatmulOutputDtype) {
    Instruction mm = matmul();
    mm.dst.dtype = DType::bf16;
    EXPECT_RULE(mm, "nc_matmul", "dst dtype bf16 not allowed: PSUM accumulates in f32");
    ChipConfig gen4 = trn2_like();
    gen4.generation = 4;
    EXPECT_VALID(mm, gen4);
}

TEST(IsaRules, MatmulInputDtypes) {
    Instruction mm = matmul();
    mm.src1 = sbuf_ap(0, 128, 4096, DType::i32, {512});
    EXPECT_RULE(mm, "nc_matmul", "src1 (moving) dtype i32 not a matmul input dtype");
    mm.src1.dtype = DType::fp8_e5m2;
    mm.src0.dtype = DType::boolean;
    EXPECT_RULE(mm, "nc_matmul", "src0 (stationary) dtype boolean not a matmul input dtype");

    mm.src0.dtype = DType::fp8_e4m3;
    ChipConfig trn1 = trn2_like();
    trn1.generation = 2;
    EXPECT_VALID(mm, trn1);
    mm.src0.dtype = mm.src1.dtype = DType::f32;
    EXPECT_VALID(mm);
}

TEST(IsaRules, BitwiseOpsNeedIntegerOperands) {
    Instruction tt = tensor_tensor();
    tt.alu0 = AluOp::bitwise_and;
    EXPECT_RULE(tt, "tensor_tensor", "dst dtype bf16 not allowed for bitwise_and (bitwise ops need i32/u8/boolean)");
    tt.dst.dtype = tt.src0.dtype = DType::i32;
    tt.src1.dtype = DType::i32;
    EXPECT_VALID(tt);

    Instruction ts = tensor_scalar();
    ts.alu1 = AluOp::bitwise_xor;
    ts.flags = 0;
    EXPECT_RULE(ts, "tensor_scalar", "bitwise ops need i32/u8/boolean");
    ts.dst.dtype = ts.src0.dtype = DType::u8;
    EXPECT_VALID(ts);
    // A per-partition scalar feeding a bitwise op is an integer too.
    ts.flags = F_S1_AP;
    ts.src2 = sbuf_ap(0, 64, 1024, DType::f32, {1});
    EXPECT_RULE(ts, "tensor_scalar", "src2 (s1) dtype f32 must be i32/u8/boolean");
    ts.src2.dtype = DType::i32;
    EXPECT_VALID(ts);
}

TEST(IsaRules, IotaNotIntoFp8) {
    Instruction io = iota();
    io.dst.dtype = DType::fp8_e4m3;
    EXPECT_RULE(io, "iota", "fp8");
    io.dst.dtype = DType::bf16;
    EXPECT_VALID(io);
}

// ---------------------------------------------------------------- per-opcode shapes
TEST(IsaRules, MatmulOperandsInSbufAndPsum) {
    Instruction mm = matmul();
    mm.src1 = psum_ap(0, 128, 4096, DType::f32, {512});
    EXPECT_RULE(mm, "nc_matmul", "src1 (moving) in psum must be in sbuf");
    mm = matmul();
    mm.dst = sbuf_ap(0, 128, 0, DType::f32, {512});
    EXPECT_RULE(mm, "nc_matmul", "dst in sbuf must be in psum");
}

TEST(IsaRules, MatmulShapes) {
    Instruction mm = matmul();
    mm.src1.partitions = 64;
    EXPECT_RULE(mm, "nc_matmul", "src1 (moving) partitions 64 != src0 (stationary) partitions 128 (contraction");

    mm = matmul();
    mm.src0.size[0] = 129;
    EXPECT_RULE(mm, "nc_matmul", "src0 (stationary) free size 129 exceeds gemm_stationary_fmax 128");

    mm = matmul();
    mm.src1.size[0] = 600;
    mm.dst = psum_ap(0, 128, 0, DType::f32, {600});
    EXPECT_RULE(mm, "nc_matmul", "src1 (moving) free size 600 exceeds gemm_moving_fmax 512");

    mm = matmul();
    mm.dst.partitions = 64;
    EXPECT_RULE(mm, "nc_matmul", "dst partitions 64 != stationary free size 128 (output shape [M,N])");

    mm = matmul();
    mm.dst.size[0] = 256;
    EXPECT_RULE(mm, "nc_matmul", "dst free elements 256 != moving free size 512");

    // Free dims are flattened: a [K, 2, 64] stationary is M = 128.
    mm = matmul();
    mm.src0 = sbuf_ap(0, 128, 0, DType::bf16, {2, 64});
    EXPECT_VALID(mm);

    ChipConfig half_array = trn2_like();
    half_array.tensor.rows = 64;
    EXPECT_RULE(matmul(), "nc_matmul", "contraction partitions 128 exceed tensor rows 64", half_array);

    ChipConfig small_banks = trn2_like();
    small_banks.psum.bytes_per_partition = 8 * 1024;  // 1 KiB banks
    mm = matmul();
    mm.dst.offset = 0;
    EXPECT_RULE(mm, "nc_matmul", "dst row of 2048 bytes exceeds one PSUM bank of 1024 bytes", small_banks);
}

TEST(IsaRules, TransposeShapes) {
    Instruction tr = tensor_transpose();
    tr.src0.size[0] = 256;
    tr.dst = psum_ap(0, 128, 0, DType::f32, {128});
    EXPECT_RULE(tr, "nc_transpose", "src0 [128, 256] exceeds the tensor engine transpose limit [128, 128]");

    tr = tensor_transpose();
    tr.dst = sbuf_ap(0, 64, 0, DType::f32, {128});
    EXPECT_RULE(tr, "nc_transpose", "dst in sbuf must be in psum");

    tr = tensor_transpose();
    tr.dst = psum_ap(0, 128, 0, DType::f32, {64});
    EXPECT_RULE(tr, "nc_transpose", "dst partitions 128 != src0 free elements 64 (transposed shape)");
    tr.dst = psum_ap(0, 64, 0, DType::f32, {64});
    EXPECT_RULE(tr, "nc_transpose", "dst free elements 64 != src0 partitions 128 (transposed shape)");

    tr = tensor_transpose();
    tr.dst.dtype = DType::f16;
    EXPECT_RULE(tr, "nc_transpose", "dst dtype f16 must be f32 or the src0 dtype bf16");
    tr.dst.dtype = DType::bf16;
    EXPECT_VALID(tr);

    Instruction vt = vector_transpose();
    vt.src0 = sbuf_ap(0, 64, 0, DType::f32, {16});
    vt.dst = sbuf_ap(0, 16, 1024, DType::f32, {64});
    EXPECT_RULE(vt, "nc_transpose", "src0 [64, 16] exceeds the vector engine transpose limit [32, 32]");
}

TEST(IsaRules, ActivationScaleBiasAndAccumulator) {
    Instruction act = activation();
    act.src1.size[0] = 2;
    EXPECT_RULE(act, "activation", "src1 (scale) free elements 2 must be 1 (per-partition scalar [P,1])");

    act = activation();
    act.src2.partitions = 64;
    EXPECT_RULE(act, "activation", "src2 (bias) partitions 64 != src0 partitions 128");

    act = activation();
    act.src1.dtype = DType::bf16;
    EXPECT_RULE(act, "activation", "src1 (scale) dtype bf16 must be f32");

    act = activation();
    act.acc.size[0] = 4;
    EXPECT_RULE(act, "activation", "acc free elements 4 must be 1 (reduce accumulator [P,1])");
    act.acc = sbuf_ap(0, 64, 8200, DType::f32, {1});
    EXPECT_RULE(act, "activation", "acc partitions 64 != src0 partitions 128");

    act = activation();
    act.dst.size[0] = 128;
    EXPECT_RULE(act, "activation", "dst free elements 128 != src0 free elements 256 (shape mismatch)");
}

TEST(IsaRules, UnusedOperandsAreIgnored) {
    Instruction act = activation();
    act.flags = 0;
    act.reduce = ReduceOp::none;
    act.src1.partitions = 0;
    act.src2.ndim = 9;
    act.acc.space = MemSpace::HBM;
    EXPECT_VALID(act);

    Instruction sel = select();
    sel.flags = 0;
    sel.src2.partitions = 500;
    EXPECT_VALID(sel);
}

TEST(IsaRules, ElementwiseShapesMatch) {
    Instruction tt = tensor_tensor();
    tt.src1.partitions = 64;
    EXPECT_RULE(tt, "tensor_tensor", "dst partitions 128 != src1 partitions 64 (shape mismatch)");

    // A row broadcast is expressed in the access pattern with a zero stride.
    tt = tensor_tensor();
    tt.src1 = psum_ap(0, 128, 0, DType::f32, {4, 64});
    tt.src1.stride[0] = 0;
    EXPECT_VALID(tt);

    Instruction copy = tensor_copy();
    copy.dst.size[0] = 511;
    EXPECT_RULE(copy, "tensor_copy", "dst free elements 511 != src0 free elements 512");

    Instruction sel = select();
    sel.src2.size[0] = 31;
    EXPECT_RULE(sel, "select", "dst free elements 32 != src2 free elements 31");

    Instruction as = affine_select();
    as.src0.partitions = 96;
    EXPECT_RULE(as, "affine_select", "dst partitions 128 != src0 partitions 96");

    Instruction ts = tensor_scalar();
    ts.src1.size[0] = 3;
    EXPECT_RULE(ts, "tensor_scalar", "src1 (s0) free elements 3 must be 1 (per-partition scalar [P,1])");
}

TEST(IsaRules, TensorReduceShapes) {
    Instruction red = tensor_reduce();
    red.reduce_ndim = 0;
    EXPECT_RULE(red, "tensor_reduce", "reduce_ndim 0 must be 1..2");
    red.reduce_ndim = 3;
    EXPECT_RULE(red, "tensor_reduce", "reduce_ndim 3 must be 1..2");

    red = tensor_reduce();
    red.reduce_ndim = 2;  // everything reduced: one value per partition
    EXPECT_RULE(red, "tensor_reduce", "dst free elements 4 != 1");
    red.dst.size[0] = 1;
    EXPECT_VALID(red);

    red = tensor_reduce();
    red.dst.partitions = 32;
    EXPECT_RULE(red, "tensor_reduce", "dst partitions 32 != src0 partitions 128");

    red = tensor_reduce();
    red.reduce = ReduceOp::none;
    EXPECT_RULE(red, "tensor_reduce", "reduce op none");
}

TEST(IsaRules, DmaCopyElementsAndDestination) {
    Instruction dma = dma_load();
    dma.dst = sbuf_ap(0, 64, 0, DType::bf16, {1024});  // another shape, same element count
    EXPECT_VALID(dma);
    dma.dst.size[0] = 1000;
    EXPECT_RULE(dma, "dma_copy", "dst elements 64000 != src0 elements 65536 (element count)");

    // DMA moves data between HBM and SBUF: PSUM is neither its source nor its destination.
    Instruction evict = dma_load();
    evict.dst = hbm_matrix_ap(0, DType::f32, 128, 512, 512);
    evict.src0 = psum_ap(0, 128, 0, DType::f32, {512});
    EXPECT_RULE(evict, "dma_copy", "src0 in psum must be in hbm or sbuf");
    std::swap(evict.dst, evict.src0);
    EXPECT_RULE(evict, "dma_copy", "dst in psum must be in hbm or sbuf");
    evict.dst = sbuf_ap(0, 128, 0, DType::f32, {512});
    EXPECT_VALID(evict);
}

// ---------------------------------------------------------------- synchronisation
TEST(IsaRules, WaitsAndSignal) {
    Instruction b = barrier();
    b.num_waits = kMaxWaits + 1;
    EXPECT_RULE(b, "barrier", "num_waits 7 exceeds 6 (max waits)");

    b = barrier();
    b.waits[1].sem = 256;
    EXPECT_RULE(b, "barrier", "wait 1 semaphore 256 out of range");
    b.num_waits = 1;  // waits beyond num_waits are not read
    EXPECT_VALID(b);

    Instruction mm = matmul();
    mm.signal = 10;
    EXPECT_RULE(mm, "nc_matmul", "signal semaphore 10 out of range");
    mm.signal = 256;
    EXPECT_RULE(mm, "nc_matmul", "signal semaphore 256 out of range");
    mm.signal = 255;
    EXPECT_VALID(mm);
}

// ---------------------------------------------------------------- corrupt encodings
TEST(IsaRules, CorruptEnumsAreRejected) {
    Instruction bad_op = barrier();
    bad_op.op = static_cast<Opcode>(200);
    EXPECT_THAT(error_of(bad_op), HasSubstr("invalid opcode 200"));

    Instruction bad_engine = barrier();
    bad_engine.engine = static_cast<Engine>(9);
    EXPECT_RULE(bad_engine, "barrier", "invalid engine 9");

    Instruction bad_dtype = tensor_copy();
    bad_dtype.dst.dtype = static_cast<DType>(40);
    EXPECT_RULE(bad_dtype, "tensor_copy", "dst invalid dtype 40");

    Instruction bad_space = tensor_copy();
    bad_space.src0.space = static_cast<MemSpace>(3);
    EXPECT_RULE(bad_space, "tensor_copy", "src0 invalid memory space 3");

    Instruction bad_func = activation();
    bad_func.func = static_cast<ActFunc>(99);
    EXPECT_RULE(bad_func, "activation", "invalid activation func 99");

    Instruction bad_alu = tensor_scalar();
    bad_alu.alu1 = static_cast<AluOp>(99);
    EXPECT_RULE(bad_alu, "tensor_scalar", "invalid alu1 alu op 99");

    Instruction bad_reduce = tensor_reduce();
    bad_reduce.reduce = static_cast<ReduceOp>(7);
    EXPECT_RULE(bad_reduce, "tensor_reduce", "invalid reduce op 7");
}

// ---------------------------------------------------------------- work accounting
TEST(InstructionWork, Flops) {
    EXPECT_EQ(instruction_flops(matmul()), 2ull * 128 * 128 * 512);
    Instruction small_mm = matmul();
    small_mm.src0 = sbuf_ap(0, 64, 0, DType::bf16, {32});
    small_mm.src1 = sbuf_ap(0, 64, 4096, DType::bf16, {100});
    EXPECT_EQ(instruction_flops(small_mm), 2ull * 64 * 32 * 100);

    EXPECT_EQ(instruction_flops(activation()), 128u * 256);
    EXPECT_EQ(instruction_flops(tensor_tensor()), 128u * 256);
    EXPECT_EQ(instruction_flops(tensor_copy()), 128u * 512);
    EXPECT_EQ(instruction_flops(select()), 128u * 32);
    EXPECT_EQ(instruction_flops(affine_select()), 128u * 128);

    Instruction ts = tensor_scalar();
    EXPECT_EQ(instruction_flops(ts), 2u * 64 * 100);
    ts.alu1 = AluOp::bypass;
    EXPECT_EQ(instruction_flops(ts), 64u * 100);

    EXPECT_EQ(instruction_flops(tensor_reduce()), 128u * 256);  // source elements

    EXPECT_EQ(instruction_flops(dma_load()), 0u);
    EXPECT_EQ(instruction_flops(memset()), 0u);
    EXPECT_EQ(instruction_flops(iota()), 0u);
    EXPECT_EQ(instruction_flops(barrier()), 0u);
    EXPECT_EQ(instruction_flops(tensor_transpose()), 0u);
}

TEST(InstructionWork, HbmBytes) {
    EXPECT_EQ(instruction_hbm_bytes(dma_load()), 128u * 512 * 2);

    Instruction store = dma_load();
    store.dst = hbm_matrix_ap(0, DType::f32, 128, 512, 512);  // cast on the way out
    store.src0 = sbuf_ap(0, 128, 0, DType::bf16, {512});
    EXPECT_EQ(instruction_hbm_bytes(store), 128u * 512 * 4);

    Instruction hbm_to_hbm = dma_load();
    hbm_to_hbm.dst = hbm_matrix_ap(1 << 20, DType::bf16, 128, 512, 512);
    EXPECT_EQ(instruction_hbm_bytes(hbm_to_hbm), 2u * 128 * 512 * 2);

    Instruction on_chip = dma_load();
    on_chip.src0 = sbuf_ap(0, 128, 65536, DType::bf16, {512});
    EXPECT_EQ(instruction_hbm_bytes(on_chip), 0u);

    EXPECT_EQ(instruction_hbm_bytes(matmul()), 0u);
    EXPECT_EQ(instruction_hbm_bytes(activation()), 0u);
}

TEST(InstructionWork, CorruptOpcodeThrows) {
    Instruction bad = barrier();
    bad.op = static_cast<Opcode>(77);
    EXPECT_THROW(instruction_flops(bad), IsaError);
    EXPECT_THROW(instruction_hbm_bytes(bad), IsaError);
}

}  // namespace
}  // namespace trnsim
