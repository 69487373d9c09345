// Chrome trace event format (the JSON object form that Perfetto and
// chrome://tracing load), streamed to a file.
//
// Layout: one process per simulated NeuronCore (pid = device index + 1), with
// threads (tracks) "Ops" (one slice per launched program, args: scope, FLOPs,
// bytes), "Scopes" (nested module / record_function / phase ranges), one
// track per engine and per DMA queue used (one slice per executed
// instruction), and counters "HBM bandwidth" (GB/s) and "SBUF occupancy"
// (KiB). Times are microseconds with nanosecond resolution.
#include <cinttypes>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "trnsim/profiler.h"

namespace trnsim::profiler {
namespace {

constexpr int kOpsTrack = 1;
constexpr int kScopesTrack = 2;
constexpr int kQueueTrackBase = 10;

// Buffered writer of JSON text; flushes in large blocks.
class Writer {
public:
    explicit Writer(const std::string& path) : file_(std::fopen(path.c_str(), "wb")) {
        if (!file_) throw std::runtime_error("profiler: cannot write trace file '" + path + "'");
        buf_.reserve(kBlock + 4096);
    }
    ~Writer() {
        if (file_) std::fclose(file_);
    }
    void close() {
        flush();
        if (std::fclose(file_) != 0) {
            file_ = nullptr;
            throw std::runtime_error("profiler: error writing the trace file");
        }
        file_ = nullptr;
    }
    Writer& raw(const char* s) {
        buf_ += s;
        return maybe_flush();
    }
    Writer& raw(const std::string& s) {
        buf_ += s;
        return maybe_flush();
    }
    Writer& str(const std::string& s) {   // a JSON string literal
        buf_ += '"';
        for (char c : s) {
            switch (c) {
                case '"': buf_ += "\\\""; break;
                case '\\': buf_ += "\\\\"; break;
                case '\n': buf_ += "\\n"; break;
                case '\t': buf_ += "\\t"; break;
                case '\r': buf_ += "\\r"; break;
                default:
                    if (static_cast<unsigned char>(c) < 0x20) {
                        char esc[8];
                        std::snprintf(esc, sizeof esc, "\\u%04x", c);
                        buf_ += esc;
                    } else {
                        buf_ += c;
                    }
            }
        }
        buf_ += '"';
        return maybe_flush();
    }
    Writer& num(int64_t v) {
        char tmp[32];
        int n = std::snprintf(tmp, sizeof tmp, "%" PRId64, v);
        buf_.append(tmp, n);
        return *this;
    }
    Writer& unum(uint64_t v) {
        char tmp[32];
        int n = std::snprintf(tmp, sizeof tmp, "%" PRIu64, v);
        buf_.append(tmp, n);
        return *this;
    }
    Writer& real(double v) {
        char tmp[40];
        int n = std::snprintf(tmp, sizeof tmp, "%.6g", v);
        buf_.append(tmp, n);
        return *this;
    }
    // Picoseconds as microseconds, floored to whole nanoseconds ("12.345"): trace readers keep
    // integer nanoseconds, and flooring both ends of every slice keeps slices nested.
    Writer& micros(int64_t ps) {
        int64_t ns = ps >= 0 ? ps / 1000 : -((-ps + 999) / 1000);
        if (ns < 0) {
            buf_ += '-';
            ns = -ns;
        }
        char tmp[40];
        int n = std::snprintf(tmp, sizeof tmp, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
        buf_.append(tmp, n);
        return *this;
    }
    // Starts the next element of the traceEvents array.
    Writer& event() {
        if (!first_event_) buf_ += ",\n";
        first_event_ = false;
        buf_ += '{';
        return *this;
    }

private:
    static constexpr size_t kBlock = 1 << 20;
    Writer& maybe_flush() {
        if (buf_.size() >= kBlock) flush();
        return *this;
    }
    void flush() {
        if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size())
            throw std::runtime_error("profiler: error writing the trace file");
        buf_.clear();
    }
    std::FILE* file_;
    std::string buf_;
    bool first_event_ = true;
};

void metadata(Writer& w, int pid, int tid, const char* what, const std::string& name) {
    w.event().raw("\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":").num(tid).raw(",\"name\":\"").raw(what);
    w.raw("\",\"args\":{\"name\":").str(name).raw("}}");
}

void sort_index(Writer& w, int pid, int tid, const char* what, int index) {
    w.event().raw("\"ph\":\"M\",\"pid\":").num(pid).raw(",\"tid\":").num(tid).raw(",\"name\":\"").raw(what);
    w.raw("\",\"args\":{\"sort_index\":").num(index).raw("}}");
}

// Picoseconds floored to a whole nanosecond, in picoseconds.
int64_t floor_ns(int64_t ps) { return (ps >= 0 ? ps / 1000 : -((-ps + 999) / 1000)) * 1000; }

void slice_head(Writer& w, int pid, int tid, const std::string& name, const char* cat, int64_t start, int64_t end) {
    w.event().raw("\"ph\":\"X\",\"pid\":").num(pid).raw(",\"tid\":").num(tid).raw(",\"name\":").str(name);
    w.raw(",\"cat\":\"").raw(cat).raw("\",\"ts\":").micros(start).raw(",\"dur\":");
    w.micros(floor_ns(end) - floor_ns(start));
}

void counter(Writer& w, int pid, const char* name, const char* unit, int64_t t, double v) {
    w.event().raw("\"ph\":\"C\",\"pid\":").num(pid).raw(",\"tid\":0,\"name\":\"").raw(name);
    w.raw("\",\"ts\":").micros(t).raw(",\"args\":{\"").raw(unit).raw("\":").real(v).raw("}}");
}

}  // namespace

void Profiler::write_chrome_trace(const std::string& path, const TraceOptions& options) const {
    Writer w(path);
    w.raw("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"trnsim profiler\",\"time_unit\":")
        .raw("\"simulated device time\"},\n\"traceEvents\":[\n");

    for (int device : devices()) {
        const int pid = device + 1;
        const ChipConfig& chip = *this->chip(device);

        // Which queues executed something on this device.
        std::array<bool, kMaxQueues> used{};
        // The four compute engines of every physical core of the device always get a track, so a
        // core a program leaves idle shows as idle.
        for (uint32_t c = 0; c < std::min(chip.lnc, kMaxPhysicalCores); ++c)
            for (uint32_t q = 0; q < 4; ++q) used[c * kQueuesPerCore + q] = true;
        for (const LaunchEvent& l : launches_)
            if (l.device == device)
                for (uint32_t i = 0; i < l.num_records; ++i) used[records_[l.first_record + i].queue] = true;

        metadata(w, pid, 0, "process_name", "NeuronCore " + std::to_string(device) + " (" + chip.name + ")");
        sort_index(w, pid, 0, "process_sort_index", device);
        metadata(w, pid, kOpsTrack, "thread_name", "Ops");
        sort_index(w, pid, kOpsTrack, "thread_sort_index", kOpsTrack);
        metadata(w, pid, kScopesTrack, "thread_name", "Scopes");
        sort_index(w, pid, kScopesTrack, "thread_sort_index", kScopesTrack);
        for (uint32_t q = 0; q < kMaxQueues; ++q) {
            if (!used[q]) continue;
            const int tid = kQueueTrackBase + static_cast<int>(q);
            metadata(w, pid, tid, "thread_name", queue_name(q));
            sort_index(w, pid, tid, "thread_sort_index", tid);
        }

        // Scopes, in the order they were opened: parents precede their children.
        for (const ScopeEvent& s : scopes_) {
            if (s.device != device || s.end_ps < 0) continue;
            slice_head(w, pid, kScopesTrack, strings_.str(s.name), scope_kind_name(s.kind), s.start_ps, s.end_ps);
            w.raw(",\"args\":{\"depth\":").unum(s.depth).raw("}}");
        }

        int64_t first = INT64_MAX, last = INT64_MIN;
        for (const LaunchEvent& l : launches_) {
            if (l.device != device) continue;
            first = std::min(first, l.start_ps);
            last = std::max(last, l.end_ps);
            Totals t;
            t.add_launch(l, records_.data());
            slice_head(w, pid, kOpsTrack, strings_.str(l.name), "op", l.start_ps, l.end_ps);
            w.raw(",\"args\":{\"scope\":").str(strings_.str(l.scope)).raw(",\"kernel\":").str(strings_.str(l.kernel));
            w.raw(",\"flops\":").unum(t.flops);
            w.raw(",\"matmul_flops\":").unum(t.matmul_flops).raw(",\"hbm_bytes\":").unum(t.hbm_bytes);
            w.raw(",\"instructions\":").unum(t.instructions).raw(",\"sbuf_bytes\":").unum(l.sbuf_bytes).raw("}}");
        }

        if (options.instructions) {
            for (const LaunchEvent& l : launches_) {
                if (l.device != device) continue;
                const std::string& op = strings_.str(l.name);
                for (uint32_t i = 0; i < l.num_records; ++i) {
                    const InstrRecord& r = records_[l.first_record + i];
                    slice_head(w, pid, kQueueTrackBase + r.queue, opcode_name(r.op), "instruction", r.start_ps,
                               r.end_ps);
                    w.raw(",\"args\":{\"op\":").str(op).raw(",\"index\":").unum(r.index);
                    if (r.tag) w.raw(",\"tag\":").str(tag_name(l, r.tag));
                    w.raw(",\"bytes\":").unum(r.bytes);
                    if (r.hbm_bytes) w.raw(",\"hbm_bytes\":").unum(r.hbm_bytes);
                    if (r.flops) w.raw(",\"flops\":").unum(r.flops);
                    w.raw("}}");
                }
            }
        }

        if (first >= last) continue;
        // HBM bandwidth: bytes per bin over the bin width, sampled at each bin start.
        const int bins = std::max(1, options.counter_bins);
        std::vector<double> hbm = hbm_bytes_timeline(device, first, last, bins);
        const double width_ps = double(last - first) / bins;
        for (int b = 0; b < bins; ++b)
            counter(w, pid, "HBM bandwidth", "GB/s", first + int64_t(b * width_ps), hbm[b] / width_ps * 1000.0);
        counter(w, pid, "HBM bandwidth", "GB/s", last, 0.0);
        // SBUF occupancy: each program's footprint while it runs.
        for (const LaunchEvent& l : launches_) {
            if (l.device != device) continue;
            counter(w, pid, "SBUF occupancy", "KiB", l.start_ps, double(l.sbuf_bytes) / 1024.0);
            counter(w, pid, "SBUF occupancy", "KiB", l.end_ps, 0.0);
        }
    }
    w.raw("\n]}\n");
    w.close();
}

}  // namespace trnsim::profiler
