// CoreMemory (mapping, bounds, gather/scatter of any access pattern) and the
// copy instructions built on it: dma_copy and tensor_copy, with casts.
#include <gtest/gtest.h>

#include <limits>

#include "exec_test_util.h"
#include "op_harness.h"

using namespace trnsim;
using namespace trnsim::testing;

namespace {

class DmaTest : public ExecTest {};

// A strided SBUF view with dims of every kind: negative, broadcast (0), gaps.
AccessPattern OddSbufView(DType dt) {
    AccessPattern ap;
    ap.space = MemSpace::SBUF;
    ap.dtype = dt;
    ap.start_partition = 5;
    ap.partitions = 7;
    ap.offset = 4096;
    ap.ndim = 4;
    ap.size = {3, 2, 4, 5};
    ap.stride = {-200, 0, 37, 2};
    return ap;
}

}  // namespace

TEST_F(DmaTest, HbmIsBackedAndBoundsChecked) {
    EXPECT_TRUE(mem.backed());
    EXPECT_EQ(mem.hbm_size(), 64ull << 20);
    mem.hbm(mem.hbm_size() - 1)[0] = 42;
    EXPECT_EQ(mem.hbm_base()[mem.hbm_size() - 1], 42);
    EXPECT_THROW(mem.hbm(mem.hbm_size()), std::out_of_range);
    EXPECT_THROW(mem.sbuf(128, 0), std::out_of_range);
    EXPECT_THROW(mem.sbuf(0, 192 * 1024), std::out_of_range);
    EXPECT_THROW(mem.psum(0, 16 * 1024), std::out_of_range);
    // SBUF partitions are disjoint host rows (padded apart, so the pitch may exceed 192 KiB).
    EXPECT_EQ(mem.sbuf(3, 10) - mem.sbuf(3, 0), 10);
    EXPECT_GE(mem.sbuf(1, 0) - mem.sbuf(0, 0), 192 * 1024);
    EXPECT_EQ(mem.sbuf(3, 0) - mem.sbuf(2, 0), mem.sbuf(1, 0) - mem.sbuf(0, 0));
    EXPECT_EQ(mem.psum(1, 0) - mem.psum(0, 0), 16 * 1024);
}

TEST(CoreMemoryTimingOnly, HbmReservedButHoldsNoData) {
    ChipConfig chip = Trn2LikeChip();
    CoreMemory mem(chip, 1ull << 40, false);   // a terabyte of address space, never touched
    EXPECT_FALSE(mem.backed());
    EXPECT_NE(mem.hbm_base(), nullptr);
    EXPECT_THROW(mem.hbm(0), std::logic_error);
    std::vector<float> buf(16);
    EXPECT_THROW(mem.load_f32(hbm_matrix_ap(0, DType::f32, 4, 4, 4), buf.data()), std::logic_error);
    mem.store_f32(sbuf_ap(0, 4, 0, DType::f32, {4}), buf.data());   // on-chip memories still work
}

TEST_F(DmaTest, AccessPatternOutOfRangeThrows) {
    std::vector<float> buf(1 << 16);
    EXPECT_THROW(mem.load_f32(sbuf_ap(120, 16, 0, DType::f32, {4}), buf.data()), std::out_of_range);
    EXPECT_THROW(mem.load_f32(sbuf_ap(0, 1, 192 * 1024 - 8, DType::f32, {3}), buf.data()), std::out_of_range);
    EXPECT_THROW(mem.load_f32(psum_ap(0, 1, 0, DType::f32, {4097}), buf.data()), std::out_of_range);
    AccessPattern backwards = sbuf_ap(0, 1, 8, DType::f32, {4});
    backwards.stride[0] = -1;   // reaches byte -4
    EXPECT_THROW(mem.load_f32(backwards, buf.data()), std::out_of_range);
    AccessPattern hbm = hbm_matrix_ap(mem.hbm_size() - 64, DType::f32, 2, 16, 16);
    EXPECT_THROW(mem.load_f32(hbm, buf.data()), std::out_of_range);
    EXPECT_THROW(mem.element(sbuf_ap(0, 2, 0, DType::f32, {4}), 2, 0), std::out_of_range);
    try {
        mem.load_f32(sbuf_ap(0, 1, 192 * 1024 - 8, DType::f32, {3}), buf.data());
    } catch (const std::out_of_range& e) {
        EXPECT_NE(std::string(e.what()).find("sbuf"), std::string::npos) << e.what();
    }
}

// load_f32 / store_f32 on strided, negative and broadcast views equal the
// element-by-element reference, for every dtype.
TEST_F(DmaTest, LoadStoreAnyViewEveryDType) {
    for (int t = 0; t < static_cast<int>(DType::count_); ++t) {
        DType dt = static_cast<DType>(t);
        AccessPattern ap = OddSbufView(dt);
        std::vector<float> stored = PutRandom(ap, -300, 300, 11 + t);
        std::vector<float> loaded(ap.elems());
        mem.load_f32(ap, loaded.data());
        ExpectSame(loaded, Get(ap), std::string("load ") + dtype_name(dt));

        // Store through a view without broadcast dims (a broadcast store has no single answer).
        AccessPattern out = ap;
        out.size = {3, 4, 5, 1};
        out.stride = {-200, 37, 2, 0};
        std::vector<float> values = Random(out.elems(), -300, 300, 99 + t);
        mem.store_f32(out, values.data());
        std::vector<float> want(values.size());
        for (size_t i = 0; i < values.size(); ++i) want[i] = RoundTo(values[i], dt);
        ExpectSame(Get(out), want, std::string("store ") + dtype_name(dt));
    }
}

TEST_F(DmaTest, DenseTileLoadsAcrossMergedDims) {
    AccessPattern ap = sbuf_ap(0, 128, 256, DType::bf16, {4, 128});
    std::vector<float> stored = PutRandom(ap, -2, 2, 3);
    std::vector<float> loaded(ap.elems());
    mem.load_f32(ap, loaded.data());
    ExpectSame(loaded, stored, "dense bf16 tile");
}

TEST_F(DmaTest, HbmToSbufWithCastAndReshape) {
    // HBM [1 x 4096] f32 -> SBUF [32 partitions x 128] bf16: row-major order is preserved.
    AccessPattern src = hbm_matrix_ap(1 << 20, DType::f32, 1, 4096, 4096);
    AccessPattern dst = sbuf_ap(0, 32, 0, DType::bf16, {128});
    std::vector<float> values = PutRandom(src, -1000, 1000, 5);
    Instruction ins = Make(Opcode::dma_copy, Engine::DMA);
    ins.dst = dst;
    ins.src0 = src;
    execute(mem, ins);
    std::vector<float> want(values.size());
    for (size_t i = 0; i < values.size(); ++i) want[i] = RoundTo(values[i], DType::bf16);
    ExpectSame(Get(dst), want, "hbm f32 -> sbuf bf16");

    // And back out to a strided HBM matrix (ld 200) as fp8_e4m3.
    AccessPattern back = hbm_matrix_ap(4 << 20, DType::fp8_e4m3, 32, 128, 200);
    ins.dst = back;
    ins.src0 = dst;
    execute(mem, ins);
    for (float& v : want) v = RoundTo(v, DType::fp8_e4m3);
    ExpectSame(Get(back), want, "sbuf bf16 -> hbm fp8");
}

TEST_F(DmaTest, TransposingDmaFromHbmColumns) {
    // Read a 64x48 f16 HBM matrix column by column into SBUF [48, 64].
    const int rows = 64, cols = 48;
    AccessPattern mat = hbm_matrix_ap(0, DType::f16, rows, cols, cols);
    std::vector<float> m = PutRandom(mat, -5, 5, 8);
    AccessPattern cols_view;
    cols_view.space = MemSpace::HBM;
    cols_view.dtype = DType::f16;
    cols_view.partitions = cols;
    cols_view.partition_stride = 1;
    cols_view.size[0] = rows;
    cols_view.stride[0] = cols;
    AccessPattern dst = sbuf_ap(16, cols, 100, DType::f16, {static_cast<uint32_t>(rows)});
    Instruction ins = Make(Opcode::dma_copy, Engine::DMA);
    ins.dst = dst;
    ins.src0 = cols_view;
    execute(mem, ins);
    std::vector<float> got = Get(dst);
    for (int c = 0; c < cols; ++c)
        for (int r = 0; r < rows; ++r) ASSERT_TRUE(SameFloat(got[c * rows + r], m[r * cols + c])) << r << "," << c;
}

TEST_F(DmaTest, SameDTypeCopyIsBitExact) {
    // i32 values beyond 2^24 and f32 NaN payloads survive a same-dtype copy.
    AccessPattern src = hbm_matrix_ap(0, DType::i32, 2, 3, 3);
    const int32_t ints[6] = {16777217, -2147483647, 123456789, 0, -1, 2147483647};
    std::memcpy(mem.hbm(0), ints, sizeof ints);
    AccessPattern dst = sbuf_ap(0, 3, 0, DType::i32, {2});
    Instruction ins = Make(Opcode::dma_copy, Engine::DMA);
    ins.dst = dst;
    ins.src0 = src;
    execute(mem, ins);
    for (int i = 0; i < 6; ++i) {
        int32_t v;
        std::memcpy(&v, mem.sbuf(i / 2, (i % 2) * 4), 4);
        EXPECT_EQ(v, ints[i]);
    }
    const uint32_t payload_nan = 0x7fa12345;
    std::memcpy(mem.hbm(64), &payload_nan, 4);
    ins.src0 = hbm_matrix_ap(64, DType::f32, 1, 1, 1);
    ins.dst = sbuf_ap(9, 1, 0, DType::f32, {1});
    execute(mem, ins);
    uint32_t copied;
    std::memcpy(&copied, mem.sbuf(9, 0), 4);
    EXPECT_EQ(copied, payload_nan);
}

TEST_F(DmaTest, BroadcastSourceAndIntegerCasts) {
    // One HBM row broadcast to 16 partitions (partition_stride 0), cast f32 -> i32 / u8 / boolean.
    AccessPattern src = hbm_matrix_ap(0, DType::f32, 16, 8, 0);
    std::vector<float> row = {-2.7f, -0.5f, 0.0f, 0.4f, 1.5f, 254.9f, 300.0f, 3e9f};
    Put(hbm_matrix_ap(0, DType::f32, 1, 8, 8), row);
    for (DType dt : {DType::i32, DType::u8, DType::boolean, DType::fp8_e5m2}) {
        AccessPattern dst = sbuf_ap(0, 16, 0, dt, {8});
        Instruction ins = Make(Opcode::dma_copy, Engine::DMA);
        ins.dst = dst;
        ins.src0 = src;
        execute(mem, ins);
        std::vector<float> want;
        for (int p = 0; p < 16; ++p)
            for (float v : row) want.push_back(RoundTo(v, dt));
        ExpectSame(Get(dst), want, dtype_name(dt));
    }
}

TEST_F(DmaTest, ElementCountMismatchThrows) {
    Instruction ins = Make(Opcode::dma_copy, Engine::DMA);
    ins.dst = sbuf_ap(0, 4, 0, DType::f32, {8});
    ins.src0 = hbm_matrix_ap(0, DType::f32, 4, 9, 9);
    EXPECT_THROW(execute(mem, ins), std::invalid_argument);
}

TEST_F(DmaTest, TensorCopyCastsPsumToSbufEveryDType) {
    AccessPattern src = psum_ap(0, 64, 2048, DType::f32, {2, 96});
    std::vector<float> values = PutRandom(src, -500, 500, 21);
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::fp8_e5m2, DType::i32}) {
        AccessPattern dst = sbuf_ap(64, 64, 1000, dt, {192});
        Instruction ins = Make(Opcode::tensor_copy, Engine::Vector);
        ins.dst = dst;
        ins.src0 = src;
        execute(mem, ins);
        std::vector<float> want(values.size());
        for (size_t i = 0; i < values.size(); ++i) want[i] = RoundTo(values[i], dt);
        ExpectSame(Get(dst), want, dtype_name(dt));
    }
    Instruction bad = Make(Opcode::tensor_copy, Engine::Vector);
    bad.dst = sbuf_ap(0, 32, 0, DType::f32, {384});   // same count, different partitions
    bad.src0 = src;
    EXPECT_THROW(execute(mem, bad), IsaError);
}

// dma_transpose (trn2+): dst[F, P] = src0[P, F] from HBM and from SBUF, exact; a chip without
// it rejects the instruction; a transpose from SBUF runs at a lower rate than from HBM.
TEST(DmaTranspose, FromHbmAndSbufExactWhereTheChipHasIt) {
    for (DType dt : {DType::bf16, DType::f32}) {
        OpHarness h("trn2");
        constexpr uint32_t R = 96, C = 128;
        const std::vector<float> x = RandomValues(R * C, 7);
        const uint8_t in = h.add(dt, x), out_t = h.add_zeros(dt, R * C), out_back = h.add_zeros(dt, R * C);
        h.run([&](KernelBuilder& kb) {
            ASSERT_TRUE(kb.has_dma_transpose());
            AccessPattern src = hbm_matrix_ap(0, dt, R, C, C);   // [96 rows, 128 columns]
            src.arg = in;
            const Tile t = kb.alloc_sbuf(C, {R}, dt), back = kb.alloc_sbuf(R, {C}, dt);
            kb.dma_transpose(t.ap(), src);       // HBM -> SBUF [128, 96]
            kb.dma_transpose(back.ap(), t.ap()); // SBUF -> SBUF [96, 128]
            AccessPattern o1 = hbm_matrix_ap(0, dt, C, R, R), o2 = hbm_matrix_ap(0, dt, R, C, C);
            o1.arg = out_t;
            o2.arg = out_back;
            kb.dma_copy(o1, t.ap());
            kb.dma_copy(o2, back.ap());
        });
        const std::vector<float> t = h.read(out_t), back = h.read(out_back);
        for (uint32_t r = 0; r < R; ++r)
            for (uint32_t c = 0; c < C; ++c) {
                const float v = RoundTo(x[r * C + c], dt);
                ASSERT_EQ(t[c * R + r], v) << dtype_name(dt) << " at " << r << "," << c;
                ASSERT_EQ(back[r * C + c], v) << dtype_name(dt) << " at " << r << "," << c;
            }
    }
    KernelBuilder trn1(load_chip("trn1"), "no_transpose");
    EXPECT_FALSE(trn1.has_dma_transpose());
    const Tile a = trn1.alloc_sbuf(128, {128}, DType::bf16), b = trn1.alloc_sbuf(128, {128}, DType::bf16);
    try {
        trn1.dma_transpose(b.ap(), a.ap());
        ADD_FAILURE() << "trn1 accepted a DMA transpose";
    } catch (const IsaError& e) {
        EXPECT_NE(std::string(e.what()).find("no DMA transpose"), std::string::npos) << e.what();
    }
}

TEST(DmaTranspose, RateFollowsTheSourceMemory) {
    const ChipConfig chip = load_chip("trn2");
    auto duration = [&](bool from_hbm, bool transpose) {
        KernelBuilder kb(chip, "dma_rate", 1ull << 24);
        const Tile t = kb.alloc_sbuf(128, {128}, DType::bf16), s = kb.alloc_sbuf(128, {128}, DType::bf16);
        AccessPattern src = from_hbm ? hbm_matrix_ap(0, DType::bf16, 128, 128, 128) : s.ap();
        if (from_hbm) src.arg = 1;
        if (transpose) kb.dma_transpose(t.ap(), src, 0);
        else kb.dma_copy(t.ap(), src, 0);
        Program p = kb.finish();
        NeuronCore core(chip, ExecMode::TimingOnly, 1ull << 24);
        std::vector<InstrRecord> rec;
        const uint64_t arg = 1 << 20;
        core.run(p, &rec, &arg, p.num_args());
        return rec.back().end_ps - rec.back().start_ps;
    };
    const int64_t hbm = duration(true, true), sbuf = duration(false, true), copy = duration(true, false);
    EXPECT_GT(hbm, copy);    // 90% of the queue rate, against a copy of 256-byte rows
    EXPECT_GT(sbuf, hbm);    // 50% from SBUF
}
