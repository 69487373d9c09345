// Fuzzing the instruction validator and the program runner through the public ISA API
// (isa.h: Instruction, validate; sim.h: NeuronCore::run). Instructions that real kernels emit
// are mutated one field at a time (opcode, engine, enums, flags, immediates, every access
// pattern field): validate() either rejects the result with an IsaError that names the
// opcode and the rule, or accepts it, and then the instruction runs on a functional core
// without any error.
// TRNSIM_FUZZ_CASES sets the number of cases (default 10,000).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "trnsim/isa.h"
#include "trnsim/ops.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {

constexpr uint64_t kHbm = 8ull << 20;

int fuzz_cases() {
    const char* v = std::getenv("TRNSIM_FUZZ_CASES");
    return v && *v ? std::atoi(v) : 10000;
}

// Instructions of a few small kernels, made standalone: absolute HBM addresses inside the
// fuzzing core's memory, no semaphores.
std::vector<Instruction> seed_instructions(const ChipConfig& chip) {
    using ops::TensorDesc;
    auto t = [](uint8_t arg, std::vector<int64_t> sizes, DType dt = DType::f32) {
        return TensorDesc::contiguous(arg, dt, std::move(sizes));
    };
    std::vector<Program> programs;
    auto add = [&](const char* name, auto&& body) {
        KernelBuilder kb(chip, name, kHbm);
        body(kb);
        programs.push_back(kb.finish());
    };
    add("mm", [&](KernelBuilder& kb) { ops::mm(kb, t(3, {64, 96}), t(1, {64, 80}), t(2, {80, 96})); });
    add("mm_bf16", [&](KernelBuilder& kb) {
        ops::mm(kb, t(3, {32, 64}, DType::bf16), t(1, {32, 48}, DType::bf16), t(2, {48, 64}, DType::bf16));
    });
    add("add", [&](KernelBuilder& kb) { ops::binary(kb, ops::Binary::add, t(3, {130, 70}), t(1, {130, 70}), t(2, {70})); });
    add("tanh", [&](KernelBuilder& kb) { ops::unary(kb, ops::Unary::tanh, t(2, {40, 33}), t(1, {40, 33})); });
    add("sum", [&](KernelBuilder& kb) { ops::reduce(kb, ops::Reduce::sum, t(2, {40}), t(1, {40, 77}), {1}); });
    add("max", [&](KernelBuilder& kb) { ops::reduce(kb, ops::Reduce::max, t(2, {77}), t(1, {40, 77}), {0}); });
    add("where", [&](KernelBuilder& kb) {
        ops::where(kb, t(4, {16, 16}), t(1, {16, 16}, DType::boolean), t(2, {16, 16}), t(3, {16, 16}));
    });
    add("softmax", [&](KernelBuilder& kb) { ops::softmax(kb, t(2, {20, 50}), t(1, {20, 50}), 1); });
    std::vector<Instruction> out;
    for (const Program& p : programs)
        for (Instruction ins : p.instrs) {
            ins.num_waits = 0;
            ins.signal = -1;
            for (AccessPattern* ap : {&ins.dst, &ins.src0, &ins.src1, &ins.src2, &ins.acc})
                if (ap->space == MemSpace::HBM && ap->arg != 0) {
                    ap->offset += (ap->arg - 1) * (kHbm / 8);
                    ap->arg = 0;
                }
            out.push_back(ins);
        }
    return out;
}

template <class T>
T pick_enum(std::mt19937& rng, T count) {
    return static_cast<T>(rng() % (static_cast<unsigned>(count) + 2));   // a few past the end too
}

int64_t pick_int(std::mt19937& rng, int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % uint64_t(hi - lo + 1)); }

void mutate_ap(AccessPattern& ap, std::mt19937& rng) {
    switch (rng() % 9) {
        case 0: ap.space = static_cast<MemSpace>(rng() % 4); break;
        case 1: ap.dtype = static_cast<DType>(rng() % 10); break;
        case 2: ap.ndim = static_cast<uint8_t>(rng() % 6); break;
        case 3: ap.partitions = static_cast<uint16_t>(pick_int(rng, 0, 200)); break;
        case 4: ap.start_partition = static_cast<uint16_t>(pick_int(rng, 0, 160)); break;
        case 5: ap.offset = rng() % 2 ? uint64_t(pick_int(rng, 0, 1 << 16)) : uint64_t(rng()) * 4096; break;
        case 6: ap.size[rng() % kMaxFreeDims] = static_cast<uint32_t>(rng() % 3 ? pick_int(rng, 0, 700) : rng()); break;
        case 7: ap.stride[rng() % kMaxFreeDims] = pick_int(rng, -3, 600); break;
        default: ap.partition_stride = pick_int(rng, -64, 1 << 14); break;
    }
}

void mutate(Instruction& ins, std::mt19937& rng) {
    AccessPattern* aps[] = {&ins.dst, &ins.src0, &ins.src1, &ins.src2, &ins.acc};
    switch (rng() % 12) {
        case 0: ins.op = pick_enum(rng, Opcode::count_); break;
        case 1: ins.engine = static_cast<Engine>(rng() % 7); break;
        case 2: ins.func = pick_enum(rng, ActFunc::count_); break;
        case 3: ins.alu0 = pick_enum(rng, AluOp::count_); break;
        case 4: ins.alu1 = pick_enum(rng, AluOp::count_); break;
        case 5: ins.reduce = pick_enum(rng, ReduceOp::count_); break;
        case 6: ins.flags ^= 1u << (rng() % 9); break;
        case 7: ins.reduce_ndim = static_cast<uint8_t>(rng() % 6); break;
        case 8: ins.dma_queue = static_cast<uint8_t>(rng() % 40); break;
        case 9: ins.imm0 = std::ldexp(float(int(rng() % 2001) - 1000), int(rng() % 20) - 10); break;
        default: mutate_ap(*aps[rng() % 5], rng); break;
    }
}

TEST(FuzzIsa, MutatedInstructionsAreRejectedNamingTheRuleOrRunClean) {
    const ChipConfig chip = load_chip("trn2");
    const std::vector<Instruction> seeds = seed_instructions(chip);
    ASSERT_GT(seeds.size(), 20u);
    NeuronCore core(chip, ExecMode::Functional, kHbm);
    std::mt19937 rng(19);
    int rejected = 0, ran = 0;
    const int cases = fuzz_cases();
    for (int i = 0; i < cases && !::testing::Test::HasFailure(); ++i) {
        Instruction ins = seeds[rng() % seeds.size()];
        for (int m = 1 + int(rng() % 3); m > 0; --m) mutate(ins, rng);
        try {
            validate(ins, chip, kHbm);
        } catch (const IsaError& e) {
            ++rejected;
            const std::string what = e.what();
            const size_t colon = what.find(": ");
            // "<opcode>: <rule>" (or "instruction: ..." for an opcode that does not exist)
            const bool names_op = static_cast<size_t>(ins.op) < static_cast<size_t>(Opcode::count_)
                                      ? what.rfind(opcode_name(ins.op), 0) == 0
                                      : what.rfind("instruction", 0) == 0;
            EXPECT_TRUE(names_op && colon != std::string::npos && what.size() > colon + 6)
                << "case " << i << ": " << what;
            continue;
        }
        Program prog;
        prog.name = "fuzz";
        prog.instrs = {ins};
        try {
            core.run(prog);
            ++ran;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "case " << i << ": validate() accepted " << opcode_name(ins.op)
                          << " but running it raised: " << e.what();
        }
    }
    EXPECT_GT(rejected, cases / 10);
    EXPECT_GT(ran, cases / 10);
}

}  // namespace
