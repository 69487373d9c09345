// KernelBuilder: on-chip allocation, instruction emitters and automatic
// semaphore insertion from memory footprints.
#include "trnsim/kernel.h"

#include <algorithm>
#include <atomic>
#include <sstream>

namespace trnsim {

// ------------------------------------------------------------------ tiles
uint64_t Tile::bytes_per_partition() const {
    uint64_t n = dtype_size(dtype);
    for (uint32_t s : shape) n *= s;
    return n;
}

static AccessPattern tile_ap(const Tile& t, uint32_t p0, uint32_t np) {
    AccessPattern ap;
    ap.space = t.space;
    ap.dtype = t.dtype;
    ap.start_partition = static_cast<uint16_t>(t.start_partition + p0);
    ap.partitions = static_cast<uint16_t>(np);
    ap.offset = t.offset;
    ap.ndim = static_cast<uint8_t>(t.shape.size());
    int64_t st = 1;
    for (int d = ap.ndim - 1; d >= 0; --d) {
        ap.size[d] = t.shape[d];
        ap.stride[d] = st;
        st *= t.shape[d];
    }
    return ap;
}

AccessPattern Tile::ap() const { return tile_ap(*this, 0, partitions); }

AccessPattern Tile::rows(uint32_t p0, uint32_t n) const {
    if (p0 + n > partitions) throw IsaError("Tile::rows: partition slice out of range");
    return tile_ap(*this, p0, n);
}

AccessPattern Tile::region(uint32_t p0, uint32_t np, uint32_t c0, uint32_t nc) const {
    AccessPattern ap = rows(p0, np);
    int last = ap.ndim - 1;
    if (c0 + nc > ap.size[last]) throw IsaError("Tile::cols: column slice out of range");
    ap.offset += static_cast<uint64_t>(c0) * dtype_size(dtype);
    ap.size[last] = nc;
    return ap;
}

AccessPattern Tile::cols(uint32_t begin, uint32_t count) const { return region(0, partitions, begin, count); }

// ------------------------------------------------------------------ builder
KernelBuilder::KernelBuilder(const ChipConfig& chip, std::string name, uint64_t hbm_bytes)
    : chip_(chip), hbm_bytes_(hbm_bytes ? hbm_bytes : chip.hbm_capacity_per_core()) {
    prog_.name = std::move(name);
    prog_.tag_names.push_back(prog_.name);
    queue_count_.assign(kMaxQueues, 0);
    fence_.assign(kMaxQueues, 0);
    // HBM records stay in one bin (they are few after folding, see add_access); on-chip ones are
    // binned by 1 KiB of SBUF and 512 B of PSUM.
    accesses_[static_cast<size_t>(MemSpace::HBM)].reset(1, 63);
    accesses_[static_cast<size_t>(MemSpace::SBUF)].reset(chip_.sbuf.bytes_per_partition, 10);
    accesses_[static_cast<size_t>(MemSpace::PSUM)].reset(chip_.psum.bytes_per_partition, 9);
    sbuf_free_.push_back({0, chip_.sbuf.bytes_per_partition});
    psum_banks_free_.push_back({0, chip_.psum.bytes_per_partition});
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static bool take_block(std::vector<KernelBuilder::Block>& free, uint64_t size, uint64_t align, uint64_t boundary,
                       uint64_t* out) {
    for (size_t i = 0; i < free.size(); ++i) {
        uint64_t b = align_up(free[i].begin, align);
        if (boundary && size <= boundary && b / boundary != (b + size - 1) / boundary) b = align_up(b, boundary);
        if (b + size <= free[i].end) {
            KernelBuilder::Block rest_lo{free[i].begin, b}, rest_hi{b + size, free[i].end};
            free.erase(free.begin() + static_cast<long>(i));
            if (rest_hi.end > rest_hi.begin) free.insert(free.begin() + static_cast<long>(i), rest_hi);
            if (rest_lo.end > rest_lo.begin) free.insert(free.begin() + static_cast<long>(i), rest_lo);
            *out = b;
            return true;
        }
    }
    return false;
}

static void give_block(std::vector<KernelBuilder::Block>& free, uint64_t begin, uint64_t end) {
    free.push_back({begin, end});
    std::sort(free.begin(), free.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    std::vector<KernelBuilder::Block> merged;
    for (auto& b : free) {
        if (!merged.empty() && merged.back().end == b.begin) merged.back().end = b.end;
        else merged.push_back(b);
    }
    free.swap(merged);
}

Tile KernelBuilder::alloc_sbuf(uint32_t partitions, std::vector<uint32_t> free_shape, DType dt) {
    Tile t;
    t.space = MemSpace::SBUF;
    t.dtype = dt;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = std::move(free_shape);
    if (partitions == 0 || partitions > chip_.sbuf.partitions || t.shape.empty() || t.shape.size() > kMaxFreeDims)
        throw IsaError("alloc_sbuf: partitions must be 1.." + std::to_string(chip_.sbuf.partitions) +
                       " and 1..4 free dims");
    uint64_t size = align_up(std::max<uint64_t>(1, t.bytes_per_partition()), 64);
    if (!take_block(sbuf_free_, size, 64, 0, &t.offset)) {
        std::ostringstream os;
        os << "alloc_sbuf: SBUF full in kernel '" << prog_.name << "': need " << size << " bytes per partition, "
           << sbuf_in_use_ << " of " << chip_.sbuf.bytes_per_partition << " in use";
        throw IsaError(os.str());
    }
    sbuf_in_use_ += size;
    sbuf_peak_ = std::max(sbuf_peak_, sbuf_in_use_);
    return t;
}

Tile KernelBuilder::alloc_psum(uint32_t partitions, uint32_t free, DType dt) {
    Tile t;
    t.space = MemSpace::PSUM;
    t.dtype = dt;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = {free};
    uint64_t bank = chip_.psum.bank_bytes();
    uint64_t size = t.bytes_per_partition();
    if (partitions == 0 || partitions > chip_.psum.partitions || size == 0 || size > bank)
        throw IsaError("alloc_psum: a PSUM tile must fit one bank (" + std::to_string(bank) + " bytes per partition)");
    uint64_t align = 4;
    while (align < size) align *= 2;
    if (!take_block(psum_banks_free_, size, std::min(align, bank), bank, &t.offset))
        throw IsaError("alloc_psum: PSUM full in kernel '" + prog_.name + "'");
    return t;
}

Tile KernelBuilder::alloc_psum_banks(uint32_t partitions, uint32_t banks) {
    const uint64_t bank = chip_.psum.bank_bytes();
    if (banks == 1) return alloc_psum(partitions, static_cast<uint32_t>(bank / 4));
    Tile t;
    t.space = MemSpace::PSUM;
    t.dtype = DType::f32;
    t.partitions = static_cast<uint16_t>(partitions);
    t.shape = {static_cast<uint32_t>(banks * bank / 4)};
    if (partitions == 0 || partitions > chip_.psum.partitions || banks == 0 ||
        banks * bank > chip_.psum.bytes_per_partition)
        throw IsaError("alloc_psum_banks: " + std::to_string(banks) + " banks of " + std::to_string(partitions) +
                       " partitions do not exist");
    if (!take_block(psum_banks_free_, banks * bank, bank, 0, &t.offset))
        throw IsaError("alloc_psum_banks: PSUM full in kernel '" + prog_.name + "'");
    return t;
}

void KernelBuilder::release(const Tile& t) {
    if (t.space == MemSpace::SBUF) {
        uint64_t size = align_up(std::max<uint64_t>(1, t.bytes_per_partition()), 64);
        give_block(sbuf_free_, t.offset, t.offset + size);
        sbuf_in_use_ -= size;
    } else {
        give_block(psum_banks_free_, t.offset, t.offset + t.bytes_per_partition());
    }
}

uint64_t KernelBuilder::sbuf_bytes_in_use() const { return sbuf_in_use_; }
uint64_t KernelBuilder::sbuf_peak() const { return sbuf_peak_; }

uint32_t KernelBuilder::tag(const std::string& name) {
    for (size_t i = 0; i < prog_.tag_names.size(); ++i)
        if (prog_.tag_names[i] == name) return tag_ = static_cast<uint32_t>(i);
    prog_.tag_names.push_back(name);
    return tag_ = static_cast<uint32_t>(prog_.tag_names.size() - 1);
}

// ------------------------------------------------------------------ dependencies
namespace {

struct Footprint {
    MemSpace space;
    uint32_t p0, p1;
    uint64_t b0, b1;
    uint8_t arg;   // HBM launch argument (0 = absolute addresses)
    uint64_t period = 0, phase = 0, run = 0;   // strided HBM pattern (see KernelBuilder::Access)
};

// The sparsest periodic description of an HBM pattern: a period p (one of its strides) such that the
// dims with larger strides step by multiples of p and the dims with smaller strides stay within one
// run shorter than p. Column blocks stored by different queues into the same rows then have disjoint
// phases. Patterns with negative strides, or no such period, stay dense.
void set_period(Footprint& f, const AccessPattern& ap) {
    const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
    struct Dim { int64_t stride, size; };
    Dim dims[5];
    int n = 0;
    for (int k = 0; k < ap.ndim; ++k)
        if (ap.size[k] > 1) dims[n++] = {ap.stride[k] * es, static_cast<int64_t>(ap.size[k])};
    if (ap.partitions > 1) dims[n++] = {ap.partition_stride * es, static_cast<int64_t>(ap.partitions)};
    for (int k = 0; k < n; ++k)
        if (dims[k].stride <= 0) return;
    double best_density = 1.0;
    for (int c = 0; c < n; ++c) {
        const int64_t period = dims[c].stride;
        int64_t run = es;
        bool ok = true;
        for (int k = 0; k < n && ok; ++k) {
            if (k == c) continue;
            if (dims[k].stride >= period) ok = dims[k].stride % period == 0;
            else run += dims[k].stride * (dims[k].size - 1);
        }
        if (!ok || run >= period) continue;
        const double density = static_cast<double>(run) / static_cast<double>(period);
        if (density < best_density) {
            best_density = density;
            f.period = static_cast<uint64_t>(period);
            f.run = static_cast<uint64_t>(run);
        }
    }
    if (f.period) f.phase = f.b0 % f.period;
}

Footprint footprint(const AccessPattern& ap) {
    Footprint f;
    f.space = ap.space;
    f.arg = ap.space == MemSpace::HBM ? ap.arg : 0;
    if (ap.space == MemSpace::HBM) {
        f.p0 = 0;
        f.p1 = 1;
    } else {
        f.p0 = ap.start_partition;
        f.p1 = ap.start_partition + ap.partitions;
    }
    const AccessPattern::ByteExtent extent = ap.byte_extent();
    f.b0 = static_cast<uint64_t>(extent.lo);
    f.b1 = static_cast<uint64_t>(extent.hi);
    if (ap.space == MemSpace::HBM) set_period(f, ap);
    return f;
}

// Two periodic patterns of the same period touch common bytes only if their runs meet modulo the
// period (phases are absolute byte offsets modulo the period).
bool phases_meet(uint64_t period, uint64_t phase_a, uint64_t run_a, uint64_t phase_b, uint64_t run_b) {
    return (phase_b + period - phase_a) % period < run_a || (phase_a + period - phase_b) % period < run_b;
}

// HBM footprints of different launch arguments are unrelated unless the kernel allows aliasing,
// in which case they may overlap anywhere.
bool overlaps(const Footprint& f, const KernelBuilder::Access& a, bool args_may_alias) {
    if (f.space != a.space) return false;
    if (f.arg != a.arg) return args_may_alias;
    if (!(f.p0 < a.p1 && a.p0 < f.p1 && f.b0 < a.b1 && a.b0 < f.b1)) return false;
    if (f.period && f.period == a.period) return phases_meet(f.period, f.phase, f.run, a.phase, a.run);
    return true;
}

bool covers(const Footprint& f, const KernelBuilder::Access& a) {
    const bool pattern_covers =
        f.period == 0 || (f.period == a.period && f.phase == a.phase && f.run >= a.run);
    return f.space == a.space && f.arg == a.arg && f.p0 <= a.p0 && a.p1 <= f.p1 && f.b0 <= a.b0 && a.b1 <= f.b1 &&
           pattern_covers;
}

KernelBuilder::Access access_of(const Footprint& f, bool is_write, uint32_t queue, uint32_t seq) {
    KernelBuilder::Access a{f.space, f.arg, f.p0, f.p1, f.b0, f.b1, is_write, queue, seq};
    a.period = f.period;
    a.phase = f.phase;
    a.run = f.run;
    return a;
}

// Reads and writes of an instruction, from its operand declarations.
void operands(const Instruction& ins, std::vector<Footprint>& reads, std::vector<Footprint>& writes) {
    reads.clear();
    writes.clear();
    for_each_operand(ins, [&](const OperandInfo& d, const AccessPattern& ap) {
        if (operand_writes(ins, d)) writes.push_back(footprint(ap));
        if (operand_reads(ins, d)) reads.push_back(footprint(ap));
    });
}

}  // namespace

void KernelBuilder::add_dependencies(Instruction& ins) {
    const uint32_t q = ins.queue();
    std::array<int64_t, kMaxQueues> need;   // highest seq needed per queue, -1 none
    need.fill(-1);
    // Barrier fences: the first instruction of each queue after a barrier waits for everything before it.
    if (fence_pending_ & (1ull << q)) {
        for (uint32_t k = 0; k < kMaxQueues; ++k)
            if (k != q && fence_[k] > 0) need[k] = std::max<int64_t>(need[k], fence_[k] - 1);
        fence_pending_ &= ~(1ull << q);
    }
    static thread_local std::vector<Footprint> reads, writes;
    operands(ins, reads, writes);
    const int64_t prev_seq = static_cast<int64_t>(queue_count_[q]) - 1;
    bool depends_on_prev = false;
    // Idempotent per record (the index may visit one twice).
    auto check = [&](const Footprint& f, bool is_write) {
        LiveAccesses& live = accesses_[static_cast<size_t>(f.space)];
        auto hazard = [&](const Access& a) {
            if (!overlaps(f, a, args_may_alias_)) return;
            if (!is_write && !a.is_write) return;   // read after read: no hazard
            if (a.queue == q) {
                if (a.is_write && !is_write && static_cast<int64_t>(a.seq) == prev_seq) depends_on_prev = true;
                return;  // same queue: in order
            }
            need[a.queue] = std::max<int64_t>(need[a.queue], a.seq);
        };
        // Different HBM arguments meet only when they may alias: then every record is a candidate.
        if (f.space == MemSpace::HBM) live.for_each(hazard);
        else live.for_each_near(f.b0, f.b1, hazard);
    };
    for (const Footprint& f : reads) check(f, false);
    for (const Footprint& f : writes) check(f, true);
    if (depends_on_prev) ins.flags |= F_DEPENDS_ON_PREV;

    std::vector<SemWait> waits;
    for (uint32_t k = 0; k < kMaxQueues; ++k)
        if (need[k] >= 0) waits.push_back(SemWait{static_cast<uint16_t>(k), static_cast<uint32_t>(need[k] + 1)});
    // Keep explicit waits the caller put on the instruction.
    for (int i = 0; i < ins.num_waits; ++i) waits.push_back(ins.waits[i]);
    // More waits than fit: a barrier on the same queue carries the excess first.
    while (waits.size() > static_cast<size_t>(kMaxWaits)) {
        Instruction b;
        b.op = Opcode::barrier;
        b.engine = ins.engine;
        b.dma_queue = ins.dma_queue;
        b.tag = ins.tag;
        for (int i = 0; i < kMaxWaits; ++i) b.waits[i] = waits[waits.size() - 1 - i];
        b.num_waits = kMaxWaits;
        waits.resize(waits.size() - kMaxWaits);
        prog_.instrs.push_back(b);
        ++queue_count_[q];
    }
    ins.num_waits = static_cast<uint8_t>(waits.size());
    for (size_t i = 0; i < waits.size(); ++i) ins.waits[i] = waits[i];
}

void KernelBuilder::record_access(const Instruction& ins, uint32_t queue, uint32_t seq) {
    static thread_local std::vector<Footprint> reads, writes;
    operands(ins, reads, writes);
    for (const Footprint& f : writes) {
        // A write supersedes every earlier access it fully covers: later hazards are with this write,
        // which is itself ordered after them.
        accesses_[static_cast<size_t>(f.space)].erase_near_if(f.b0, f.b1, [&](const Access& a) { return covers(f, a); });
        add_access(access_of(f, true, queue, seq));
    }
    for (const Footprint& f : reads) add_access(access_of(f, false, queue, seq));
}

// Keeps the live-access list short: an identical footprint of the same kind and queue is
// updated in place, and once one (queue, kind, HBM argument) has too many HBM records they
// are folded into their bounding box with the newest seq. Folding only adds waits (it never
// drops an ordering) and keeps building linear for long kernels, whose HBM reads of inputs
// and writes of outputs are never superseded. On-chip records are bounded by the tiles a
// kernel allocates (a write covering a tile prunes them), and folding them would serialise
// double buffers, so they are never folded.
void KernelBuilder::add_access(const Access& n) {
    constexpr size_t kFoldAt = 64;
    LiveAccesses& live = accesses_[static_cast<size_t>(n.space)];
    auto in_group = [&](const Access& a) {
        return a.is_write == n.is_write && a.queue == n.queue && a.space == n.space && a.arg == n.arg;
    };
    // An identical record starts at the same byte, so it is among the records near n.b0.
    bool updated = false;
    live.for_each_near(n.b0, n.b0 + 1, [&](Access& a) {
        if (updated || !in_group(a)) return;
        if (a.p0 == n.p0 && a.p1 == n.p1 && a.b0 == n.b0 && a.b1 == n.b1 && a.period == n.period &&
            a.phase == n.phase && a.run == n.run) {
            a.seq = n.seq;
            updated = true;
        }
    });
    if (updated) return;
    live.insert(n);
    if (n.space != MemSpace::HBM) return;
    size_t same_group = 0;
    live.for_each([&](const Access& a) { same_group += in_group(a); });
    if (same_group < kFoldAt) return;
    Access box = n;
    // The box keeps a periodic pattern that all its records share (one queue's column block of
    // many row tiles); otherwise it is dense.
    live.for_each([&](const Access& a) {
        if (!in_group(a)) return;
        if (a.period != box.period || a.phase != box.phase || a.run != box.run) box.period = box.phase = box.run = 0;
        box.p0 = std::min(box.p0, a.p0);
        box.p1 = std::max(box.p1, a.p1);
        box.b0 = std::min(box.b0, a.b0);
        box.b1 = std::max(box.b1, a.b1);
        box.seq = std::max(box.seq, a.seq);
    });
    live.erase_if(in_group);
    live.insert(box);
}

// ------------------------------------------------------------------ live-access index
void KernelBuilder::LiveAccesses::reset(uint64_t extent_bytes, uint32_t bin_shift) {
    clear();
    shift_ = bin_shift;
    const uint64_t bins = bin_shift >= 63 ? 1 : std::max<uint64_t>(1, (extent_bytes + (1ull << bin_shift) - 1) >> bin_shift);
    bins_.assign(bins, {});
}

void KernelBuilder::LiveAccesses::clear() {
    slots_.clear();
    gen_.clear();
    alive_.clear();
    free_.clear();
    for (auto& b : bins_) b.clear();
}

// Bins [first, last] that bytes [b0, b1) fall in; addresses past the extent go to the last bin,
// so two overlapping ranges always share a bin.
std::pair<size_t, size_t> KernelBuilder::LiveAccesses::bins_of(uint64_t b0, uint64_t b1) const {
    const size_t last = bins_.size() - 1;
    if (shift_ >= 63) return {0, 0};
    const size_t lo = static_cast<size_t>(std::min<uint64_t>(b0 >> shift_, last));
    const size_t hi = static_cast<size_t>(std::min<uint64_t>((b1 > b0 ? b1 - 1 : b0) >> shift_, last));
    return {lo, hi};
}

void KernelBuilder::LiveAccesses::insert(const Access& a) {
    uint32_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
        slots_[slot] = a;
        alive_[slot] = 1;
    } else {
        slot = static_cast<uint32_t>(slots_.size());
        slots_.push_back(a);
        gen_.push_back(0);
        alive_.push_back(1);
    }
    const auto [lo, hi] = bins_of(a.b0, a.b1);
    for (size_t b = lo; b <= hi; ++b) bins_[b].push_back({slot, gen_[slot]});
}

void KernelBuilder::LiveAccesses::erase_slot(uint32_t slot) {
    alive_[slot] = 0;
    ++gen_[slot];
    free_.push_back(slot);
}

// visit(slot) for each live record in the bins of [b0, b1); entries of records erased before or
// by the visit are dropped from the bins.
template <class F>
void KernelBuilder::LiveAccesses::scan_bins(uint64_t b0, uint64_t b1, F&& visit) {
    const auto [lo, hi] = bins_of(b0, b1);
    for (size_t b = lo; b <= hi; ++b) {
        std::vector<Entry>& bin = bins_[b];
        for (size_t i = 0; i < bin.size();) {
            const Entry e = bin[i];
            auto live = [&] { return alive_[e.slot] && gen_[e.slot] == e.gen; };
            if (live()) visit(e.slot);
            if (!live()) {
                bin[i] = bin.back();
                bin.pop_back();
                continue;
            }
            ++i;
        }
    }
}

template <class F>
void KernelBuilder::LiveAccesses::for_each_near(uint64_t b0, uint64_t b1, F&& f) {
    scan_bins(b0, b1, [&](uint32_t slot) { f(slots_[slot]); });
}

template <class Pred>
void KernelBuilder::LiveAccesses::erase_near_if(uint64_t b0, uint64_t b1, Pred&& pred) {
    scan_bins(b0, b1, [&](uint32_t slot) {
        if (pred(slots_[slot])) erase_slot(slot);
    });
}

template <class F>
void KernelBuilder::LiveAccesses::for_each(F&& f) {
    for (size_t s = 0; s < slots_.size(); ++s)
        if (alive_[s]) f(slots_[s]);
}

template <class Pred>
void KernelBuilder::LiveAccesses::erase_if(Pred&& pred) {
    for (size_t s = 0; s < slots_.size(); ++s)
        if (alive_[s] && pred(slots_[s])) erase_slot(static_cast<uint32_t>(s));
}

uint32_t KernelBuilder::emit(Instruction ins) {
    ins.tag = ins.tag ? ins.tag : tag_;
    add_dependencies(ins);
    validate(ins, chip_, hbm_bytes_);
    const uint32_t q = ins.queue();
    uint32_t seq = queue_count_[q]++;
    record_access(ins, q, seq);
    prog_.instrs.push_back(ins);
    return static_cast<uint32_t>(prog_.instrs.size() - 1);
}

void KernelBuilder::barrier() {
    for (uint32_t k = 0; k < kMaxQueues; ++k) fence_[k] = queue_count_[k];
    fence_pending_ = ~0ull;
}

Program KernelBuilder::finish() {
    static std::atomic<uint64_t> next_id{1};
    Program p = std::move(prog_);
    p.prevalidated = true;
    p.id = next_id++;
    compute_arg_extents(p);
    prog_ = Program{};
    prog_.name = p.name;
    prog_.tag_names.push_back(p.name);
    tag_ = 0;
    queue_count_.assign(kMaxQueues, 0);
    fence_.assign(kMaxQueues, 0);
    fence_pending_ = 0;
    for (auto& live : accesses_) live.clear();
    return p;
}

// ------------------------------------------------------------------ emitters
static Instruction make(Opcode op, Engine e) {
    Instruction ins;
    ins.op = op;
    ins.engine = e;
    return ins;
}

void KernelBuilder::dma_copy(const AccessPattern& dst, const AccessPattern& src, int queue) {
    emit_dma(Opcode::dma_copy, dst, src, queue);
}

void KernelBuilder::dma_transpose(const AccessPattern& dst, const AccessPattern& src, int queue) {
    emit_dma(Opcode::dma_transpose, dst, src, queue);
}

void KernelBuilder::emit_dma(Opcode op, const AccessPattern& dst, const AccessPattern& src, int queue) {
    Instruction ins = make(op, Engine::DMA);
    if (queue < 0) {
        queue = static_cast<int>(next_dma_queue_);
        next_dma_queue_ = (next_dma_queue_ + 1) % chip_.dma.queues;
    }
    ins.dma_queue = static_cast<uint8_t>(queue);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

bool KernelBuilder::has_dma_transpose() const {
    return chip_.dma.transpose_efficiency_hbm > 0 && chip_.dma.transpose_efficiency_sbuf > 0;
}

void KernelBuilder::matmul(const AccessPattern& psum_dst, const AccessPattern& stationary,
                           const AccessPattern& moving, bool accumulate) {
    Instruction ins = make(Opcode::nc_matmul, Engine::Tensor);
    ins.dst = psum_dst;
    ins.src0 = stationary;
    ins.src1 = moving;
    if (accumulate) ins.flags |= F_ACCUMULATE;
    emit(ins);
}

void KernelBuilder::transpose(const AccessPattern& dst, const AccessPattern& src, Engine e) {
    Instruction ins = make(Opcode::nc_transpose, e);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::activation(const AccessPattern& dst, const AccessPattern& src, ActFunc f, float scale,
                               float bias) {
    activation_ex(dst, src, f, scale, nullptr, bias, nullptr);
}

void KernelBuilder::activation_ex(const AccessPattern& dst, const AccessPattern& src, ActFunc f, float scale,
                                  const AccessPattern* scale_ap, float bias, const AccessPattern* bias_ap,
                                  ReduceOp reduce, const AccessPattern* acc) {
    Instruction ins = make(Opcode::activation, Engine::Scalar);
    ins.dst = dst;
    ins.src0 = src;
    ins.func = f;
    ins.imm0 = scale;
    ins.imm1 = bias;
    if (scale_ap) {
        ins.src1 = *scale_ap;
        ins.flags |= F_SCALE_AP;
    }
    if (bias_ap) {
        ins.src2 = *bias_ap;
        ins.flags |= F_BIAS_AP;
    }
    ins.reduce = reduce;
    if (reduce != ReduceOp::none) {
        if (!acc) throw IsaError("activation: a reduce needs an acc operand");
        ins.acc = *acc;
    }
    emit(ins);
}

void KernelBuilder::tensor_tensor(const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b, AluOp op,
                                  Engine e) {
    Instruction ins = make(Opcode::tensor_tensor, e);
    ins.dst = dst;
    ins.src0 = a;
    ins.src1 = b;
    ins.alu0 = op;
    emit(ins);
}

void KernelBuilder::tensor_scalar(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0, AluOp op1,
                                  float s1, Engine e) {
    tensor_scalar_ex(dst, a, op0, s0, nullptr, op1, s1, nullptr, 0, e);
}

void KernelBuilder::tensor_scalar_ex(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0,
                                     const AccessPattern* s0_ap, AluOp op1, float s1, const AccessPattern* s1_ap,
                                     uint32_t reverse_flags, Engine e) {
    Instruction ins = make(Opcode::tensor_scalar, e);
    ins.dst = dst;
    ins.src0 = a;
    ins.alu0 = op0;
    ins.alu1 = op1;
    ins.imm0 = s0;
    ins.imm1 = s1;
    if (s0_ap) {
        ins.src1 = *s0_ap;
        ins.flags |= F_S0_AP;
    }
    if (s1_ap) {
        ins.src2 = *s1_ap;
        ins.flags |= F_S1_AP;
    }
    ins.flags |= reverse_flags & (F_REVERSE0 | F_REVERSE1);
    emit(ins);
}

void KernelBuilder::tensor_reduce(const AccessPattern& dst, const AccessPattern& src, ReduceOp op, int reduce_ndim,
                                  Engine e) {
    Instruction ins = make(Opcode::tensor_reduce, e);
    ins.dst = dst;
    ins.src0 = src;
    ins.reduce = op;
    ins.reduce_ndim = static_cast<uint8_t>(reduce_ndim);
    emit(ins);
}

void KernelBuilder::tensor_copy(const AccessPattern& dst, const AccessPattern& src, Engine e) {
    Instruction ins = make(Opcode::tensor_copy, e);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::memset(const AccessPattern& dst, float value, Engine e) {
    Instruction ins = make(Opcode::memset, e);
    ins.dst = dst;
    ins.imm0 = value;
    emit(ins);
}

void KernelBuilder::iota(const AccessPattern& dst, const Affine& a) {
    Instruction ins = make(Opcode::iota, Engine::GpSimd);
    ins.dst = dst;
    ins.affine = a;
    emit(ins);
}

void KernelBuilder::affine_select(const AccessPattern& dst, const AccessPattern& src, const Affine& a, AluOp cmp,
                                  float fill) {
    Instruction ins = make(Opcode::affine_select, Engine::GpSimd);
    ins.dst = dst;
    ins.src0 = src;
    ins.affine = a;
    ins.alu0 = cmp;
    ins.imm0 = fill;
    emit(ins);
}

void KernelBuilder::select(const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& on_true,
                           const AccessPattern& on_false, Engine e) {
    Instruction ins = make(Opcode::select, e);
    ins.dst = dst;
    ins.src0 = mask;
    ins.src1 = on_true;
    ins.src2 = on_false;
    ins.flags |= F_S1_AP;
    emit(ins);
}

void KernelBuilder::max8(const AccessPattern& dst, const AccessPattern& src) {
    Instruction ins = make(Opcode::max8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::find_index8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values) {
    Instruction ins = make(Opcode::nc_find_index8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = data;
    ins.src1 = values;
    emit(ins);
}

void KernelBuilder::match_replace8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values,
                                   float imm, const AccessPattern* indices) {
    Instruction ins = make(Opcode::nc_match_replace8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = data;
    ins.src1 = values;
    ins.imm0 = imm;
    if (indices) {
        ins.acc = *indices;
        ins.flags |= F_ACC_OUT;
    }
    emit(ins);
}

}  // namespace trnsim
