// The neuron device in torch.profiler: a Kineto activity profiler (registered with
// PyTorch's PrivateUse1ProfilerRegistry) whose session, while a profile with
// ProfilerActivity.PrivateUse1 records, turns every program the neuron devices launch
// into one device-kernel activity:
//
//   name      the ATen operator that launched it (the innermost CPU op open on the
//             launching thread, found through Kineto's correlation ids), else the
//             program's name
//   track     process = device index, thread "Ops" (resource 0)
//   times     the simulated start and end, mapped onto the host clock (below)
//   link      the launching CPU op, so its device time columns (self_device_time_total,
//             device_time_total) add up the simulated time of its launches
//
// With TRNSIM_TORCH_PROFILER_INSTRUCTIONS=1 every executed instruction is also an
// activity on its engine's or DMA queue's track. They are GPU_USER_ANNOTATION activities
// and carry no link, so the device time totals count each launch once.
//
// Host mapping. Device time only advances while the simulator runs a launch, so a
// device's simulated clock is mapped to the host clock with a per-device offset that
// never decreases (host ns = simulated ns + offset). At each launch the offset rises, if
// needed, so that the launch ends no earlier than the host saw it finish and starts no
// earlier than the CPU op that issued it. Durations and the order of a device's launches
// are exactly the simulated ones, gaps are at least the simulated gaps, launches on a
// track never overlap, and a launch that fits in its CPU op ends when the host saw it
// finish.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/launch_recording.h"
#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

using libkineto::ActivityType;

constexpr int32_t kOpsResource = 0;   // the track of launches; queue q is resource q + 1

bool instructions_requested() {
    const char* v = std::getenv("TRNSIM_TORCH_PROFILER_INSTRUCTIONS");
    return v && *v && std::string(v) != "0";
}

// Correlation ids Kineto pushes for the CPU ops open on this thread, for one session.
struct CorrelationStack {
    uint64_t session = 0;
    std::vector<uint64_t> ids;
};
thread_local CorrelationStack tls_correlation;

struct LaunchRecord {
    int device;
    size_t kernel;               // index into the session's kernel names
    uint64_t correlation;        // innermost CPU op's correlation id, 0 = none
    int64_t start_ps, end_ps;    // simulated
    int64_t host_end_ns;         // host clock when the simulator had run it
    uint64_t flops, hbm_bytes;
    size_t first_instruction;    // into the session's instructions (when recorded)
    uint32_t num_instructions;
};

struct InstructionRecord {
    uint8_t queue;
    Opcode op;
    int64_t start_ps, end_ps;
    uint64_t bytes, flops;
};

class NeuronActivitySession final : public libkineto::IActivityProfilerSession {
public:
    explicit NeuronActivitySession(bool record_instructions)
        : serial_(next_serial_.fetch_add(1) + 1),
          record_instructions_(record_instructions),
          buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {
        buffer_->gpuOpCount = -1;
    }
    ~NeuronActivitySession() override { detach(); }

    void start() override {
        start_ns_ = c10::getTime();
        try {
            for (c10::DeviceIndex i = 0; i < device_count(); ++i)
                attached_.push_back(launch_recording::attach(
                    device(i), [this](const Device& d, const Program& p, const std::vector<InstrRecord>& r) {
                        record(d, p, r);
                    }));
            status_ = libkineto::TraceStatus::RECORDING;
        } catch (const std::exception& e) {
            detach();
            errors_.push_back(std::string("neuron: cannot record the devices: ") + e.what());
            status_ = libkineto::TraceStatus::ERROR;
        }
    }

    void stop() override {
        detach();   // no launch is recorded after this returns
        end_ns_ = c10::getTime();
        if (status_ == libkineto::TraceStatus::RECORDING) status_ = libkineto::TraceStatus::PROCESSING;
    }

    std::vector<std::string> errors() override { return errors_; }

    void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

    void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                      int64_t, int64_t) override {
        if (!buffer_) return;   // already handed to Kineto
        buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_ ? end_ns_ : c10::getTime(), "neuron");
        std::unordered_map<int, int64_t> offsets;   // device -> host ns minus simulated ns
        for (const LaunchRecord& l : launches_) {
            const libkineto::ITraceActivity* cpu_op =
                l.correlation && linked_activity ? linked_activity(static_cast<int32_t>(l.correlation)) : nullptr;
            const int64_t start_ns = l.start_ps / 1000, end_ns = l.end_ps / 1000;
            int64_t& offset = offsets.try_emplace(l.device, std::numeric_limits<int64_t>::min()).first->second;
            offset = std::max(offset, l.host_end_ns - end_ns);
            if (cpu_op) offset = std::max(offset, cpu_op->timestamp() - start_ns);
            const std::string& kernel = kernel_names_[l.kernel];
            auto& act = add_activity(ActivityType::CONCURRENT_KERNEL, cpu_op ? cpu_op->name() : kernel);
            act.startTime = start_ns + offset;
            act.endTime = end_ns + offset;
            act.device = l.device;
            act.resource = kOpsResource;
            act.threadId = kOpsResource;
            if (cpu_op) {
                act.id = static_cast<int32_t>(l.correlation);
                act.linked = cpu_op;
            }
            act.addMetadataQuoted("kernel", kernel);
            act.addMetadata("device_start_ps", l.start_ps);
            act.addMetadata("device_end_ps", l.end_ps);
            act.addMetadata("instructions", l.num_instructions);
            act.addMetadata("flops", l.flops);
            act.addMetadata("hbm_bytes", l.hbm_bytes);
            act.log(logger);
            if (!record_instructions_) continue;
            for (uint32_t i = 0; i < l.num_instructions; ++i) {
                const InstructionRecord& r = instructions_[l.first_instruction + i];
                auto& ins = add_activity(ActivityType::GPU_USER_ANNOTATION, opcode_name(r.op));
                ins.startTime = r.start_ps / 1000 + offset;
                ins.endTime = r.end_ps / 1000 + offset;
                ins.device = l.device;
                ins.resource = r.queue + 1;
                ins.threadId = r.queue + 1;
                ins.addMetadataQuoted("op", act.activityName);
                ins.addMetadata("bytes", r.bytes);
                ins.addMetadata("flops", r.flops);
                ins.log(logger);
            }
        }
    }

    std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
        // Kineto takes one device per session: the lowest-index device that ran something
        // (the other devices' tracks are named by their resources).
        if (launches_.empty()) return nullptr;
        int first = launches_.front().device;
        for (const LaunchRecord& l : launches_) first = std::min(first, l.device);
        const ChipConfig& config = chip();
        return std::make_unique<libkineto::DeviceInfo>(first, first, "neuron:" + std::to_string(first),
                                                       "NeuronCore " + std::to_string(first) + " (" + config.name + ")");
    }

    std::vector<libkineto::ResourceInfo> getResourceInfos() override {
        std::map<int, std::set<uint32_t>> queues;   // device -> instruction queues used
        for (const LaunchRecord& l : launches_) {
            auto& used = queues[l.device];
            for (uint32_t i = 0; record_instructions_ && i < l.num_instructions; ++i)
                used.insert(instructions_[l.first_instruction + i].queue);
        }
        std::vector<libkineto::ResourceInfo> out;
        for (const auto& [dev, used] : queues) {
            out.push_back(libkineto::ResourceInfo{kOpsResource, kOpsResource, dev, "Ops"});
            for (uint32_t q : used)
                out.push_back(libkineto::ResourceInfo{int64_t(q) + 1, int64_t(q) + 1, dev, profiler::queue_name(q)});
        }
        return out;
    }

    std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

    void pushCorrelationId(uint64_t id) override {
        if (tls_correlation.session != serial_) tls_correlation = CorrelationStack{serial_, {}};
        tls_correlation.ids.push_back(id);
    }

    void popCorrelationId() override {
        if (tls_correlation.session == serial_ && !tls_correlation.ids.empty()) tls_correlation.ids.pop_back();
    }

private:
    libkineto::GenericTraceActivity& add_activity(ActivityType type, const std::string& name) {
        buffer_->activities.push_back(std::make_unique<libkineto::GenericTraceActivity>(buffer_->span, type, name));
        return *buffer_->activities.back();
    }

    void detach() {
        for (uint64_t id : attached_) launch_recording::detach(id);
        attached_.clear();
    }

    // Runs on the launching thread, right after the simulator ran the program.
    void record(const Device& d, const Program& prog, const std::vector<InstrRecord>& records) {
        const int64_t host_end_ns = c10::getTime();
        const uint64_t correlation = tls_correlation.session == serial_ && !tls_correlation.ids.empty()
                                         ? tls_correlation.ids.back()
                                         : 0;
        LaunchRecord l{};
        l.device = d.index();
        l.correlation = correlation;
        l.host_end_ns = host_end_ns;
        l.start_ps = l.end_ps = d.now_ps();
        if (!records.empty()) {
            l.start_ps = records.front().start_ps;
            l.end_ps = records.front().end_ps;
        }
        for (const InstrRecord& r : records) {
            l.start_ps = std::min(l.start_ps, r.start_ps);
            l.end_ps = std::max(l.end_ps, r.end_ps);
            l.flops += r.flops;
            l.hbm_bytes += r.hbm_bytes;
        }
        l.num_instructions = static_cast<uint32_t>(records.size());
        std::lock_guard<std::mutex> lock(mutex_);
        auto [name, added] = kernel_index_.try_emplace(prog.name, kernel_names_.size());
        if (added) kernel_names_.push_back(prog.name);
        l.kernel = name->second;
        l.first_instruction = instructions_.size();
        if (record_instructions_)
            for (const InstrRecord& r : records)
                instructions_.push_back(InstructionRecord{r.queue, r.op, r.start_ps, r.end_ps, r.bytes, r.flops});
        launches_.push_back(l);
    }

    static inline std::atomic<uint64_t> next_serial_{0};
    const uint64_t serial_;
    const bool record_instructions_;
    std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;   // owns the activities; handed to Kineto
    std::vector<uint64_t> attached_;                      // launch_recording consumer ids
    std::vector<std::string> errors_;
    int64_t start_ns_ = 0, end_ns_ = 0;

    std::mutex mutex_;                                    // guards what record() appends
    std::unordered_map<std::string, size_t> kernel_index_;
    std::vector<std::string> kernel_names_;
    std::vector<LaunchRecord> launches_;
    std::vector<InstructionRecord> instructions_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
public:
    const std::string& name() const override { return name_; }
    const std::set<ActivityType>& availableActivities() const override { return activities_; }

    // A session only for traces that ask for device activity (ProfilerActivity.PrivateUse1).
    std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                   const libkineto::Config&) override {
        if (!activity_types.count(ActivityType::CONCURRENT_KERNEL)) return nullptr;
        return std::make_unique<NeuronActivitySession>(instructions_requested());
    }
    std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                   const std::set<ActivityType>& activity_types,
                                                                   const libkineto::Config& config) override {
        return configure(activity_types, config);
    }

private:
    const std::string name_ = "neuron";
    const std::set<ActivityType> activities_ = {ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_USER_ANNOTATION};
};

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

}  // namespace
}  // namespace trnsim::neuron
