// Profiler: recording (a vector append per launch) and aggregation.
#include "trnsim/profiler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace trnsim::profiler {

StringTable::StringTable() { intern(""); }

uint32_t StringTable::intern(std::string_view s) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    ids_.emplace(std::string_view(strings_.back()), id);
    return id;
}

namespace {
thread_local uint32_t tls_op_label = 0;
}  // namespace

void Profiler::set_op_label(uint32_t id) { tls_op_label = id; }
uint32_t Profiler::op_label() { return tls_op_label; }

const char* scope_kind_name(ScopeKind k) {
    switch (k) {
        case ScopeKind::Module: return "module";
        case ScopeKind::User: return "user";
        case ScopeKind::Phase: return "phase";
    }
    return "?";
}

std::string queue_name(uint32_t q) {
    static const char* const kEngines[kNumEngineQueues] = {"Tensor", "Vector", "Scalar", "GpSimd", "Sync"};
    const uint32_t local = queue_local(q), core = queue_core(q);
    std::string name = local < kNumEngineQueues ? kEngines[local] : "DMA q" + std::to_string(local - kNumEngineQueues);
    // Physical core 0 keeps the plain names; the other cores of a logical core say which they are.
    if (core > 0) name += " (core " + std::to_string(core) + ")";
    return name;
}

void Totals::add_launch(const LaunchEvent& launch, const InstrRecord* records) {
    ++launches;
    instructions += launch.num_records;
    time_ps += launch.end_ps - launch.start_ps;
    for (uint32_t i = 0; i < launch.num_records; ++i) {
        const InstrRecord& r = records[launch.first_record + i];
        flops += r.flops;
        if (opcode_info(r.op).work == WorkKind::matmul) matmul_flops += r.flops;
        hbm_bytes += r.hbm_bytes;
    }
}

namespace {

// Highest SBUF byte (exclusive) an access pattern touches within a partition, and its
// partition range end; (0, 0) when it is not in SBUF.
void sbuf_extent(const AccessPattern& ap, uint64_t& max_byte, uint32_t& max_partition) {
    if (ap.space != MemSpace::SBUF || ap.partitions == 0) return;
    max_byte = std::max<uint64_t>(max_byte, static_cast<uint64_t>(ap.byte_extent().hi));
    max_partition = std::max<uint32_t>(max_partition, uint32_t(ap.start_partition) + ap.partitions);
}

uint64_t sbuf_footprint(const Program& prog) {
    uint64_t max_byte = 0;
    uint32_t max_partition = 0;
    for (const Instruction& ins : prog.instrs)
        for_each_operand(ins, [&](const OperandInfo&, const AccessPattern& ap) {
            sbuf_extent(ap, max_byte, max_partition);
        });
    return max_byte * max_partition;
}

}  // namespace

Profiler::~Profiler() { detach_all(); }

Profiler::DeviceState& Profiler::state_locked(const Device& device) {
    auto [it, inserted] = devices_.try_emplace(device.index());
    if (inserted) it->second.chip = device.chip();
    return it->second;
}

// set_recorder() waits for launches running the previous recorder, and those take mutex_ in
// record(): it is called with mutex_ released.
void Profiler::attach(Device& device) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        state_locked(device).device = &device;
    }
    device.set_recorder([this](const Device& d, const Program& p, const std::vector<InstrRecord>& r) {
        record(d, p, r);
    });
}

void Profiler::detach(Device& device) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = devices_.find(device.index());
        if (it == devices_.end() || it->second.device != &device) return;
        it->second.device = nullptr;
    }
    device.set_recorder(nullptr);
}

void Profiler::detach_all() {
    std::vector<Device*> attached;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [index, st] : devices_)
            if (st.device) attached.push_back(std::exchange(st.device, nullptr));
    }
    for (Device* d : attached) d->set_recorder(nullptr);
}

void Profiler::record(const Device& device, const Program& prog, const std::vector<InstrRecord>& records) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceState& st = state_locked(device);
    LaunchEvent ev{};
    ev.device = device.index();
    ev.kernel = strings_.intern(prog.name);
    const uint32_t label = tls_op_label;
    ev.name = label ? label : ev.kernel;
    ev.scope = st.open.empty() ? 0 : st.open.back().name;
    ev.first_record = records_.size();
    ev.num_records = static_cast<uint32_t>(records.size());
    ev.first_tag = static_cast<uint32_t>(tag_names_.size());
    ev.num_tags = static_cast<uint32_t>(prog.tag_names.size());
    for (const std::string& tag : prog.tag_names) tag_names_.push_back(strings_.intern(tag));
    ev.sbuf_bytes = sbuf_footprint(prog);
    if (records.empty()) {
        ev.start_ps = ev.end_ps = device.now_ps();
    } else {
        ev.start_ps = records.front().start_ps;
        ev.end_ps = records.front().end_ps;
        for (const InstrRecord& r : records) {
            ev.start_ps = std::min(ev.start_ps, r.start_ps);
            ev.end_ps = std::max(ev.end_ps, r.end_ps);
        }
    }
    records_.insert(records_.end(), records.begin(), records.end());
    launches_.push_back(ev);
    launch_count_.fetch_add(1, std::memory_order_relaxed);
}

uint32_t Profiler::push_scope(Device& device, std::string_view name, ScopeKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceState& st = state_locked(device);
    auto id = static_cast<uint32_t>(scopes_.size());
    uint32_t name_id = strings_.intern(name);
    scopes_.push_back(ScopeEvent{device.index(), name_id, kind, static_cast<uint32_t>(st.open.size()),
                                 device.now_ps(), -1});
    st.open.push_back(OpenScope{id, name_id});
    return id;
}

void Profiler::pop_scope(Device& device, uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceState& st = state_locked(device);
    auto it = std::find_if(st.open.begin(), st.open.end(), [id](const OpenScope& s) { return s.id == id; });
    if (it == st.open.end())
        throw std::invalid_argument("profiler: scope " + std::to_string(id) + " is not open on device " +
                                    std::to_string(device.index()));
    const int64_t now = device.now_ps();
    for (auto open = it; open != st.open.end(); ++open) scopes_[open->id].end_ps = now;
    st.open.erase(it, st.open.end());
}

const std::string& Profiler::tag_name(const LaunchEvent& l, uint32_t tag) const {
    if (tag >= l.num_tags) return strings_.str(0);
    return strings_.str(tag_names_[l.first_tag + tag]);
}

const ChipConfig* Profiler::chip(int device) const {
    auto it = devices_.find(device);
    return it == devices_.end() ? nullptr : &it->second.chip;
}

std::vector<int> Profiler::devices() const {
    std::vector<int> out;
    for (const auto& [index, st] : devices_) {
        bool used = std::any_of(launches_.begin(), launches_.end(), [i = index](const LaunchEvent& l) { return l.device == i; }) ||
                    std::any_of(scopes_.begin(), scopes_.end(), [i = index](const ScopeEvent& s) { return s.device == i; });
        if (used) out.push_back(index);
    }
    std::sort(out.begin(), out.end());
    return out;
}

WindowSummary Profiler::summarize(int device, int64_t t0_ps, int64_t t1_ps) const {
    WindowSummary out;
    std::unordered_map<uint64_t, size_t> row_of;   // (name << 32 | scope) -> row
    bool any = false;
    for (const LaunchEvent& l : launches_) {
        if ((device >= 0 && l.device != device) || l.start_ps < t0_ps || l.start_ps >= t1_ps) continue;
        if (!any) {
            out.start_ps = l.start_ps;
            out.end_ps = l.end_ps;
            any = true;
        }
        out.start_ps = std::min(out.start_ps, l.start_ps);
        out.end_ps = std::max(out.end_ps, l.end_ps);
        out.totals.add_launch(l, records_.data());
        out.peak_sbuf_bytes = std::max(out.peak_sbuf_bytes, l.sbuf_bytes);
        for (uint32_t i = 0; i < l.num_records; ++i) {
            const InstrRecord& r = records_[l.first_record + i];
            out.busy_ps[r.queue] += r.end_ps - r.start_ps;
        }
        uint64_t key = (uint64_t(l.name) << 32) | l.scope;
        auto [it, inserted] = row_of.try_emplace(key, out.rows.size());
        if (inserted) out.rows.push_back(OpRow{strings_.str(l.name), strings_.str(l.scope), {}});
        out.rows[it->second].totals.add_launch(l, records_.data());
    }
    std::stable_sort(out.rows.begin(), out.rows.end(),
                     [](const OpRow& a, const OpRow& b) { return a.totals.time_ps > b.totals.time_ps; });
    return out;
}

namespace {

// Adds 'amount' spread uniformly over [s, e) to equal bins over [t0, t1).
void spread(std::vector<double>& bins, int64_t t0, int64_t t1, int64_t s, int64_t e, double amount) {
    const int n = static_cast<int>(bins.size());
    if (n == 0 || t1 <= t0) return;
    const double width = double(t1 - t0) / n;
    if (e <= s) {   // instantaneous: all in the bin containing s
        if (s < t0 || s >= t1) return;
        bins[std::min(n - 1, int((s - t0) / width))] += amount;
        return;
    }
    const double per_ps = amount / double(e - s);
    const int64_t cs = std::max(s, t0), ce = std::min(e, t1);
    if (ce <= cs) return;
    int b = std::min(n - 1, int((cs - t0) / width));
    for (; b < n; ++b) {
        const double b0 = t0 + b * width, b1 = t0 + (b + 1) * width;
        const double lo = std::max<double>(cs, b0), hi = std::min<double>(ce, b1);
        if (hi > lo) bins[b] += (hi - lo) * per_ps;
        if (b1 >= ce) break;
    }
}

}  // namespace

std::vector<std::vector<double>> Profiler::queue_utilisation(int device, int64_t t0_ps, int64_t t1_ps,
                                                             int bins) const {
    std::vector<std::vector<double>> out(kMaxQueues, std::vector<double>(std::max(bins, 0), 0.0));
    if (bins <= 0 || t1_ps <= t0_ps) return out;
    for (const LaunchEvent& l : launches_) {
        if (l.device != device || l.end_ps <= t0_ps || l.start_ps >= t1_ps) continue;
        for (uint32_t i = 0; i < l.num_records; ++i) {
            const InstrRecord& r = records_[l.first_record + i];
            spread(out[r.queue], t0_ps, t1_ps, r.start_ps, r.end_ps, double(r.end_ps - r.start_ps));
        }
    }
    const double width = double(t1_ps - t0_ps) / bins;
    for (auto& q : out)
        for (double& v : q) v = std::min(1.0, v / width);
    return out;
}

std::vector<double> Profiler::hbm_bytes_timeline(int device, int64_t t0_ps, int64_t t1_ps, int bins) const {
    std::vector<double> out(std::max(bins, 0), 0.0);
    for (const LaunchEvent& l : launches_) {
        if (l.device != device || l.end_ps <= t0_ps || l.start_ps >= t1_ps) continue;
        for (uint32_t i = 0; i < l.num_records; ++i) {
            const InstrRecord& r = records_[l.first_record + i];
            if (r.hbm_bytes) spread(out, t0_ps, t1_ps, r.start_ps, r.end_ps, double(r.hbm_bytes));
        }
    }
    return out;
}

}  // namespace trnsim::profiler
