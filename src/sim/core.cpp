// NeuronCore: runs programs functionally (unless timing-only) and on the timing model.
#include <algorithm>

#include "exec/matmul_batch.h"
#include "timing.h"
#include "trnsim/interrupt.h"
#include "trnsim/sim.h"

namespace trnsim {

void RunStats::add(const RunStats& o) {
    if (instructions == 0) start_ps = o.start_ps;
    end_ps = std::max(end_ps, o.end_ps);
    instructions += o.instructions;
    flops += o.flops;
    matmul_flops += o.matmul_flops;
    hbm_bytes += o.hbm_bytes;
    for (size_t q = 0; q < busy_ps.size(); ++q) busy_ps[q] += o.busy_ps[q];
}

NeuronCore::NeuronCore(const ChipConfig& chip, ExecMode mode, uint64_t hbm_bytes, uint32_t physical_cores)
    : chip_(chip), mode_(mode), physical_cores_(physical_cores ? physical_cores : chip.lnc) {
    uint64_t size = hbm_bytes ? hbm_bytes : chip_.hbm_capacity_per_core() * physical_cores_;
    mem_ = std::make_unique<CoreMemory>(chip_, size, mode == ExecMode::Functional, physical_cores_);
    timing_ = std::make_unique<TimingModel>(chip_, physical_cores_);
    moving_cache_ = std::make_unique<MovingOperandCache>();
}

NeuronCore::~NeuronCore() = default;

int64_t NeuronCore::now_ps() const { return timing_->idle_time(); }

void NeuronCore::advance_to(int64_t t_ps) { timing_->advance_to(t_ps); }

static bool same_ap(const AccessPattern& a, const AccessPattern& b) {
    return a.space == b.space && a.dtype == b.dtype && a.ndim == b.ndim && a.arg == b.arg &&
           a.start_partition == b.start_partition && a.partitions == b.partitions && a.offset == b.offset &&
           a.partition_stride == b.partition_stride && a.size == b.size && a.stride == b.stride;
}

// 'next' accumulates onto the PSUM tile 'first' writes, right after it.
static bool continues_matmul_chain(const Instruction& first, const Instruction& next) {
    return next.op == Opcode::nc_matmul && next.core == first.core && (next.flags & F_ACCUMULATE) &&
           same_ap(next.dst, first.dst) &&
           next.src0.free_elems() == first.src0.free_elems() && next.src1.free_elems() == first.src1.free_elems();
}

// Whether an instruction's destination may touch the SBUF bytes the cache holds.
static bool writes_sbuf_under(const AccessPattern& dst, const MovingOperandCache& c) {
    if (dst.space != MemSpace::SBUF) return false;
    if (dst.start_partition + dst.partitions <= c.p0 || c.p1 <= dst.start_partition) return false;
    const AccessPattern::ByteExtent e = dst.byte_extent();
    return e.lo < static_cast<AccessPattern::WideInt>(c.b1) && static_cast<AccessPattern::WideInt>(c.b0) < e.hi;
}

// Whether running the matmul chain [c0, c1) before instruction 'mid' (which comes earlier in
// the program) could change either's result: 'mid' writes the chain's inputs, or touches its
// PSUM tile.
static bool conflicts(const Instruction& mid, const std::vector<Instruction>& instrs, size_t c0, size_t c1) {
    const AccessPattern& out = instrs[c0].dst;
    bool conflict = false;
    for_each_operand(mid, [&](const OperandInfo& d, const AccessPattern& ap) {
        if (conflict) return;
        if (operand_reads(mid, d) && ap.space == MemSpace::PSUM && ap.may_overlap(out)) conflict = true;
        if (!operand_writes(mid, d)) return;
        if (ap.may_overlap(out)) conflict = true;
        for (size_t i = c0; i < c1 && !conflict; ++i)
            conflict = ap.may_overlap(instrs[i].src0) || ap.may_overlap(instrs[i].src1);
    });
    return conflict;
}

static bool same_moving(const std::vector<Instruction>& instrs, size_t a0, size_t a1, size_t b0, size_t b1) {
    if (a1 - a0 != b1 - b0 || instrs[a0].core != instrs[b0].core) return false;
    if ((instrs[a0].flags & F_ACCUMULATE) != (instrs[b0].flags & F_ACCUMULATE)) return false;
    if (instrs[a0].src0.free_elems() != instrs[b0].src0.free_elems()) return false;
    for (size_t i = 0; i < a1 - a0; ++i)
        if (!same_ap(instrs[a0 + i].src1, instrs[b0 + i].src1) ||
            instrs[a0 + i].src0.partitions != instrs[b0 + i].src0.partitions)
            return false;
    return true;
}

// Checks a relocatable program's launch arguments against HBM.
static void check_args(const Program& prog, const uint64_t* args, size_t num_args, uint64_t hbm_size) {
    if (num_args != prog.num_args())
        throw IsaError("program '" + prog.name + "' takes " + std::to_string(prog.num_args()) + " arguments, got " +
                       std::to_string(num_args));
    for (size_t i = 0; i < num_args; ++i)
        if (args[i] > hbm_size || prog.arg_extent[i] > hbm_size - args[i])
            throw IsaError("program '" + prog.name + "': argument " + std::to_string(i) + " at " +
                           std::to_string(args[i]) + " needs " + std::to_string(prog.arg_extent[i]) +
                           " bytes, beyond HBM (" + std::to_string(hbm_size) + " bytes)");
}

// Binds a relocatable program's arguments: every HBM operand gets its absolute address.
static void relocate(const Program& prog, const uint64_t* args, Program& out) {
    out.name = prog.name;
    out.instrs = prog.instrs;
    out.prevalidated = prog.prevalidated;
    out.arg_extent.clear();
    for (Instruction& ins : out.instrs)
        for_each_declared_operand(ins, [&](AccessPattern& ap) {
            if (ap.space == MemSpace::HBM && ap.arg) {
                ap.offset += args[ap.arg - 1];
                ap.arg = 0;
            }
        });
}

// Drops cached fp32 operand copies whose SBUF bytes 'dst' may overwrite.
void NeuronCore::invalidate_cached_operands(const AccessPattern& dst) {
    if (dst.space != MemSpace::SBUF) return;
    if (moving_cache_->valid && writes_sbuf_under(dst, *moving_cache_)) moving_cache_->valid = false;
    for (MovingOperandCache& e : moving_cache_->stationaries)
        if (e.valid && writes_sbuf_under(dst, e)) e.valid = false;
}

namespace {

// The interrupt epoch at which this thread's run in progress began.
thread_local uint64_t tls_run_epoch = 0;

// Throws Interrupted when interrupt_runs() was called since the run began (at 'epoch').
void check_interrupt(uint64_t epoch, const Program& prog, size_t index) {
    if (interrupt_epoch().load(std::memory_order_acquire) == epoch) return;
    throw Interrupted("simulation of " + prog.name + " interrupted at instruction " + std::to_string(index) +
                      " of " + std::to_string(prog.instrs.size()));
}

}  // namespace

// Functional pass: every instruction's semantics in program order, on the SBUF and PSUM of its
// physical core, except that matmul chains of one core sweeping the same moving operands run
// together when nothing between them touches their operands or PSUM tiles.
void NeuronCore::execute_functional(const Program& prog) {
    const uint64_t epoch = tls_run_epoch;
    constexpr size_t kMaxMatmulBatch = 8;
    const auto& in = prog.instrs;
    std::vector<std::pair<size_t, size_t>> ahead;   // later chains already executed in a batch
    moving_cache_->valid = false;
    for (MovingOperandCache& e : moving_cache_->stationaries) e.valid = false;
    size_t index = 0;
    size_t next_check = 0;   // matmul chains and batches advance 'index' by more than one
    while (index < in.size()) {
        if (!ahead.empty() && ahead.front().first == index) {
            index = ahead.front().second;
            ahead.erase(ahead.begin());
            continue;
        }
        if (index >= next_check) {
            check_interrupt(epoch, prog, index);
            next_check = index + 64;
        }
        const Instruction& ins = in[index];
        size_t end = index + 1;
        if (ins.core != mem_->selected_core()) {
            // The cached operand copies describe the other core's SBUF.
            mem_->select_core(ins.core);
            moving_cache_->valid = false;
            for (MovingOperandCache& e : moving_cache_->stationaries) e.valid = false;
        }
        if (ins.op == Opcode::nc_matmul) {
            while (end < in.size() && continues_matmul_chain(ins, in[end])) ++end;
            std::vector<MatmulChainRef> batch{{&ins, end - index}};
            size_t scan = end;
            std::vector<size_t> between;
            while (batch.size() < kMaxMatmulBatch && scan < in.size()) {
                size_t c0 = scan;
                while (c0 < in.size() && in[c0].op != Opcode::nc_matmul) between.push_back(c0++);
                if (c0 >= in.size()) break;
                size_t c1 = c0 + 1;
                while (c1 < in.size() && continues_matmul_chain(in[c0], in[c1])) ++c1;
                if (!same_moving(in, index, end, c0, c1)) break;
                bool safe = true;
                for (size_t m : between) safe = safe && !conflicts(in[m], in, c0, c1);
                for (const MatmulChainRef& b : batch)
                    safe = safe && !b.first->dst.may_overlap(in[c0].dst);
                if (!safe) break;
                batch.push_back({&in[c0], c1 - c0});
                ahead.push_back({c0, c1});
                scan = c1;
            }
            execute_matmul_batch(*mem_, batch.data(), batch.size(), moving_cache_.get());
        } else {
            execute(*mem_, ins);
            for_each_operand(ins, [&](const OperandInfo& d, const AccessPattern& ap) {
                if (operand_writes(ins, d)) invalidate_cached_operands(ap);
            });
        }
        index = end;
    }
}

RunStats NeuronCore::run(const Program& program, std::vector<InstrRecord>* records, const uint64_t* args,
                         size_t num_args) {
    const bool functional = mode_ == ExecMode::Functional;
    check_args(program, args, num_args, mem_->hbm_size());

    // A program's timing depends only on its instructions (every program starts on an idle
    // core), so a program run before reuses its stats unless records are wanted.
    const RunStats* memo = nullptr;
    if (!records && program.id != 0) {
        auto it = timing_memo_.find(program.id);
        if (it != timing_memo_.end()) memo = &it->second;
    }
    const Program* bound = &program;
    if (functional && program.num_args()) {
        relocate(program, args, relocated_);
        bound = &relocated_;
    }
    const Program& prog = *bound;
    if (!memo && !prog.prevalidated)
        for (const Instruction& ins : program.instrs) {
            validate(ins, chip_, mem_->hbm_size());
            if (ins.core >= physical_cores_)
                throw IsaError(std::string(opcode_info(ins.op).name) + ": runs on physical core " +
                               std::to_string(ins.core) + " of a logical core of " + std::to_string(physical_cores_));
        }
    if (program.cores > physical_cores_)
        throw IsaError("program '" + program.name + "' is built for " + std::to_string(program.cores) +
                       " physical cores (LNC=" + std::to_string(program.cores) + "); this NeuronCore has " +
                       std::to_string(physical_cores_));
    const uint64_t epoch = interrupt_epoch().load(std::memory_order_relaxed);
    tls_run_epoch = epoch;
    if (functional) execute_functional(prog);

    RunStats st;
    st.start_ps = timing_->idle_time();
    if (memo) {
        st = *memo;
        st.start_ps += timing_->idle_time();
        st.end_ps += timing_->idle_time();
        timing_->advance_to(st.end_ps);
        return st;
    }
    timing_->begin_program(st.start_ps);
    if (records) records->reserve(records->size() + prog.instrs.size());
    uint32_t index = 0;
    for (const Instruction& ins : prog.instrs) {
        if ((index & 255) == 0) check_interrupt(epoch, program, index);
        TimingModel::Slot s = timing_->schedule(ins);
        const uint32_t q = ins.queue();
        st.busy_ps[q] += s.end_ps - s.start_ps;
        uint64_t flops = instruction_flops(ins);
        uint64_t hbm = instruction_hbm_bytes(ins);
        st.flops += flops;
        if (ins.op == Opcode::nc_matmul) st.matmul_flops += flops;
        st.hbm_bytes += hbm;
        if (records) {
            const CostKind kind = opcode_info(ins.op).cost;
            uint64_t bytes = kind == CostKind::dma_copy || kind == CostKind::dma_transpose
                                 ? ins.src0.elems() * dtype_size(ins.dst.dtype)
                                                        : ins.dst.bytes();
            records->push_back(InstrRecord{index, ins.tag, ins.op, static_cast<uint8_t>(q), s.start_ps, s.end_ps,
                                           bytes, hbm, flops, s.throttled_ps});
        }
        ++index;
    }
    st.instructions = prog.instrs.size();
    st.end_ps = std::max(st.start_ps, timing_->idle_time());
    if (program.id != 0) {
        RunStats rel = st;
        rel.end_ps -= st.start_ps;
        rel.start_ps = 0;
        timing_memo_[program.id] = rel;
    }
    return st;
}

}  // namespace trnsim
