// trnsim._C: the Python face of the neuron backend. Importing it registers
// everything (static initializers in the other translation units); the
// functions here serve python/trnsim/neuron.
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/fallback.h"
#include "aten/native/launch.h"
#include "distributed/backend.h"
#include "python/compiler_bindings.h"
#include "python/profiler_bindings.h"
#include "runtime/devices.h"
#include "runtime/generator.h"
#include "runtime/shutdown.h"

namespace py = pybind11;
using namespace trnsim::neuron;

PYBIND11_MODULE(_C, m) {
    m.doc() = "trnsim PyTorch backend: the 'neuron' device";

    m.def("_init", [] {
        torch::utils::register_fork_handler_for_device_init(at::kPrivateUse1);
        at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
    });
    m.def("_device_count", [] { return static_cast<int>(device_count()); });
    m.def("_current_device", [] { return static_cast<int>(current_device()); });
    m.def("_set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
    m.def("_exchange_device", [](int index) {
        int old = current_device();
        if (index >= 0) set_current_device(static_cast<c10::DeviceIndex>(index));
        return old;
    });
    m.def("_chip_name", [] { return chip().name; });
    // What torch.neuron.get_device_properties reports for neuron:index.
    m.def("_device_properties", [](int index) {
        const trnsim::ChipConfig& c = chip();
        const auto i = static_cast<c10::DeviceIndex>(index);
        py::dict d;
        d["name"] = "trnsim NeuronCore (" + c.name + ")";
        d["chip"] = c.name;
        d["generation"] = c.generation;
        d["physical_cores"] = c.lnc;
        d["total_memory"] = device(i).allocator().capacity();
        d["sbuf_partitions"] = c.sbuf.partitions;
        d["sbuf_bytes_per_partition"] = c.sbuf.bytes_per_partition;
        d["psum_bytes_per_partition"] = c.psum.bytes_per_partition;
        d["dma_queues"] = c.dma.queues;
        d["peak_flops_bf16"] = c.peak_flops_bf16() * c.lnc;
        return d;
    });
    m.def("_timing_only", [] { return timing_only(); });
    m.def("_set_timing_only", [](bool on) {
        set_exec_mode(on ? trnsim::ExecMode::TimingOnly : trnsim::ExecMode::Functional);
    });
    m.def("_any_device_created", [] { return any_device_created(); });
    m.def("_get_default_generator", [](int index) {
        const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(index));
        return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
    });
    m.def("_device_time_ps", [](int index) {
        return device(static_cast<c10::DeviceIndex>(index)).now_ps();
    });
    // Called at interpreter exit (python/trnsim/neuron): see runtime/shutdown.h.
    m.def("_quiesce_autograd_threads", [] {
        py::gil_scoped_release no_gil;
        quiesce_autograd_threads();
    });
    m.def("_fallback_ops", [] { return fallback_counts(); });
    m.def("_reset_fallback_ops", [] { reset_fallback_counts(); });
    // Runs aten::<name>.<overload> through the CPU fallback's CPU run, whatever kernels the
    // operator has: how tests check the fallback for every operator (trnsim.neuron never uses it).
    m.def("_run_on_cpu", [](const std::string& name, const std::string& overload, py::args args, py::kwargs kwargs) {
        c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
        torch::jit::Stack stack = torch::jit::createStackForSchema(op.schema(), args, kwargs, std::nullopt);
        {
            py::gil_scoped_release no_gil;
            at::AutoDispatchBelowADInplaceOrView below_autograd;
            run_on_cpu(op, &stack);
        }
        return torch::jit::createPyObjectForStack(std::move(stack));
    });
    m.def("_kernel_cache_size", [] { return kernel_cache_size(); });
    m.def("_program_cache_stats", [] {
        const trnsim::ProgramCache::Stats st = trnsim::shared_program_cache().stats();
        py::dict d;
        d["entries"] = st.entries;
        d["capacity"] = st.capacity;
        d["instructions"] = st.instructions;
        d["hits"] = st.hits;
        d["misses"] = st.misses;
        d["evictions"] = st.evictions;
        return d;
    });
    m.def("_set_program_cache_capacity", [](size_t capacity) {
        trnsim::shared_program_cache().set_capacity(capacity);
    });
    m.def("_set_launch_trace", [](bool enabled) { set_launch_trace(enabled); });
    // Kernel launches since tracing was enabled: (program, device, start_ps, end_ps,
    // instructions, flops, hbm_bytes), in launch order.
    m.def("_take_launch_trace", [] {
        py::list out;
        for (const LaunchSlice& s : take_launch_trace())
            out.append(py::make_tuple(s.name, s.device, s.start_ps, s.end_ps, s.instructions, s.flops, s.hbm_bytes));
        return out;
    });
    init_profiler_bindings(m);
    init_compiler_bindings(m);
    init_distributed_bindings(m);
}
