#include "profiler/op_observer.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace trnsim::neuron::op_observer {
namespace {

// Operators whose FLOPs are counted: the leaves matmuls and convolutions decompose into
// (aten::linear and aten::matmul reach one of these), and fused attention kernels.
enum class FlopKind : uint8_t { none, mm, addmm, bmm, baddbmm, convolution, attention };

FlopKind flop_kind(const char* name) {
    static const std::unordered_map<std::string_view, FlopKind> kinds = {
        {"aten::mm", FlopKind::mm},
        {"aten::addmm", FlopKind::addmm},
        {"aten::bmm", FlopKind::bmm},
        {"aten::baddbmm", FlopKind::baddbmm},
        {"aten::convolution", FlopKind::convolution},
        {"aten::_scaled_dot_product_flash_attention", FlopKind::attention},
        {"aten::_scaled_dot_product_efficient_attention", FlopKind::attention},
        {"aten::_scaled_dot_product_cudnn_attention", FlopKind::attention},
        {"aten::_scaled_dot_product_fused_attention_overrideable", FlopKind::attention},
    };
    auto it = kinds.find(name);
    return it == kinds.end() ? FlopKind::none : it->second;
}

struct OpInfo {
    uint32_t label;
    FlopKind kind;
};

struct State {
    std::atomic<profiler::Profiler*> prof{nullptr};
    std::atomic<bool> in_backward{false};
    std::atomic<uint64_t> flops{0};
    at::CallbackHandle handle = at::INVALID_CALLBACK_HANDLE;
    std::mutex mutex;                                        // guards ops and handle
    std::unordered_map<const char*, OpInfo> ops;             // operator name pointer -> info
};

State& state() {
    static State* s = new State();   // leaked: callbacks may run during static destruction
    return *s;
}

// Per thread: the labels of the operators being executed, and how many counted ops are open
// (an op running inside a counted one, e.g. a fallback kernel's CPU call, is not counted again).
thread_local std::vector<uint32_t> tls_labels;
thread_local int tls_counted_depth = 0;

std::vector<int64_t> sizes(const c10::IValue& v) {
    if (!v.isTensor()) return {};
    return v.toTensor().sizes().vec();
}

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
    int64_t p = 1;
    for (size_t i = from; i < v.size(); ++i) p *= v[i];
    return p;
}

std::vector<int64_t> int_list(const c10::IValue& v) { return v.isIntList() ? v.toIntVector() : std::vector<int64_t>{}; }

uint64_t count_flops(FlopKind kind, c10::ArrayRef<const c10::IValue> in) {
    auto matmul = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) -> uint64_t {
        // a [..., M, K] @ b [..., K, N]; batch dims of a (bmm: equal).
        if (a.size() < 2 || b.size() < 2) return 0;
        return uint64_t(2 * product(a) * b.back());
    };
    switch (kind) {
        case FlopKind::mm:
        case FlopKind::bmm:
            return in.size() >= 2 ? matmul(sizes(in[0]), sizes(in[1])) : 0;
        case FlopKind::addmm:
        case FlopKind::baddbmm:
            return in.size() >= 3 ? matmul(sizes(in[1]), sizes(in[2])) : 0;
        case FlopKind::convolution: {
            // input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
            if (in.size() < 7) return 0;
            auto x = sizes(in[0]), w = sizes(in[1]);
            if (x.size() < 3 || w.size() != x.size()) return 0;
            auto stride = int_list(in[3]), padding = int_list(in[4]), dilation = int_list(in[5]);
            const bool transposed = in[6].isBool() && in[6].toBool();
            int64_t spatial = 1;
            for (size_t d = 2; d < x.size(); ++d) {
                const size_t i = d - 2;
                if (transposed) {
                    spatial *= x[d];
                } else {
                    int64_t s = i < stride.size() ? stride[i] : 1, p = i < padding.size() ? padding[i] : 0;
                    int64_t dl = i < dilation.size() ? dilation[i] : 1;
                    spatial *= (x[d] + 2 * p - dl * (w[d] - 1) - 1) / s + 1;
                }
            }
            return uint64_t(2 * x[0] * product(w) * spatial);
        }
        case FlopKind::attention: {
            // q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]: QK^T and PV, no causal discount.
            if (in.size() < 3) return 0;
            auto q = sizes(in[0]), k = sizes(in[1]), v = sizes(in[2]);
            if (q.size() != 4 || k.size() != 4 || v.size() != 4) return 0;
            return uint64_t(2 * q[0] * q[1] * q[2] * k[2] * (q[3] + v[3]));
        }
        case FlopKind::none:
            break;
    }
    return 0;
}

struct Context : at::ObserverContext {
    bool counted = false;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    State& s = state();
    profiler::Profiler* prof = s.prof.load(std::memory_order_acquire);
    auto ctx = std::make_unique<Context>();
    if (!prof) {
        tls_labels.push_back(0);
        return ctx;
    }
    OpInfo info;
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        auto it = s.ops.find(fn.name());
        if (it == s.ops.end()) it = s.ops.emplace(fn.name(), OpInfo{prof->intern(fn.name()), flop_kind(fn.name())}).first;
        info = it->second;
    }
    tls_labels.push_back(info.label);
    profiler::Profiler::set_op_label(info.label);
    if (info.kind != FlopKind::none) {
        if (tls_counted_depth == 0 && !s.in_backward.load(std::memory_order_relaxed))
            s.flops.fetch_add(count_flops(info.kind, fn.inputs()), std::memory_order_relaxed);
        ++tls_counted_depth;
        ctx->counted = true;
    }
    return ctx;
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
    if (ctx && static_cast<Context*>(ctx)->counted) --tls_counted_depth;
    if (!tls_labels.empty()) tls_labels.pop_back();
    profiler::Profiler::set_op_label(tls_labels.empty() ? 0 : tls_labels.back());
}

}  // namespace

void start(profiler::Profiler& prof) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ops.clear();   // labels are ids of this profiler's string table
    s.flops.store(0);
    s.in_backward.store(false);
    s.prof.store(&prof, std::memory_order_release);
    if (s.handle == at::INVALID_CALLBACK_HANDLE)
        s.handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                             .needsInputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
}

void stop() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.prof.store(nullptr, std::memory_order_release);
    if (s.handle != at::INVALID_CALLBACK_HANDLE) {
        at::removeCallback(s.handle);
        s.handle = at::INVALID_CALLBACK_HANDLE;
    }
    s.ops.clear();
}

void set_in_backward(bool in_backward) { state().in_backward.store(in_backward); }

uint64_t forward_flops() { return state().flops.load(); }

}  // namespace trnsim::neuron::op_observer
