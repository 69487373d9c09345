#include "aten/fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "runtime/devices.h"

namespace trnsim::neuron {
namespace {

struct FallbackLog {
    std::mutex mutex;
    std::map<std::string, int64_t> counts;
    std::set<std::string> warned;   // not cleared by a reset: the warning is once per process
};

FallbackLog& log() {
    static auto* l = new FallbackLog();
    return *l;
}

// Read at every call so tests and users can switch it at run time.
bool strict_mode() {
    const char* v = std::getenv("TRNSIM_STRICT");
    return v && std::strcmp(v, "0") != 0 && *v != '\0';
}

std::string op_name(const c10::OperatorHandle& op) {
    const c10::OperatorName& name = op.schema().operator_name();
    return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Operators whose result shape depends on tensor values: timing-only mode cannot run them at all.
bool value_dependent_shape(const std::string& name) {
    static const std::set<std::string> ops = {
        "aten::nonzero", "aten::nonzero_numpy", "aten::argwhere", "aten::masked_select",
        "aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
        "aten::unique_dim_consecutive", "aten::repeat_interleave", "aten::bincount", "aten::histc",
        "aten::_local_scalar_dense"};
    return ops.count(name.substr(0, name.find('.'))) > 0;
}

// In timing-only mode device tensors hold no values, so the CPU cannot compute on them.
void check_not_timing_only(const std::string& name) {
    if (!timing_only()) return;
    if (value_dependent_shape(name))
        TORCH_CHECK_NOT_IMPLEMENTED(false, "trnsim: ", name, " cannot run in timing-only mode (TRNSIM_MODE=timing "
                                    "or trnsim.timing_only()): the shape of its result depends on tensor values, "
                                    "and device tensors there have shapes but no values");
    TORCH_CHECK_NOT_IMPLEMENTED(false, "trnsim: ", name, " is not implemented natively on neuron; in functional "
                                "mode it would run on the CPU, but in timing-only mode (TRNSIM_MODE=timing or "
                                "trnsim.timing_only()) device tensors hold no values for the CPU to compute on, "
                                "and a CPU run would take no simulated time (printing a tensor and other value "
                                "reads reach such operators too)");
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    std::string name = op_name(op);
    check_not_timing_only(name);
    TORCH_CHECK_NOT_IMPLEMENTED(!strict_mode(), "trnsim: ", name,
                                " is not implemented natively on neuron, and TRNSIM_STRICT=1 "
                                "forbids running it on the CPU");
    for (const c10::Argument& arg : op.schema().arguments())
        TORCH_CHECK_NOT_IMPLEMENTED(arg.type()->str().find("Generator") == std::string::npos,
                                    "trnsim: random operator ", name, " has no neuron kernel; "
                                    "the CPU fallback would draw from the CPU generator instead "
                                    "of the neuron generator");
    bool first;
    {
        FallbackLog& l = log();
        std::lock_guard<std::mutex> lock(l.mutex);
        l.counts[name] += 1;
        first = l.warned.insert(name).second;
    }
    if (first)
        TORCH_WARN("trnsim: ", name, " is not implemented natively on neuron; running it on the "
                   "CPU (counted in torch.neuron.fallback_ops())");
    run_on_cpu(op, stack);
}

std::map<std::string, int64_t> fallback_counts() {
    FallbackLog& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    return l.counts;
}

void reset_fallback_counts() {
    FallbackLog& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.counts.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace trnsim::neuron
