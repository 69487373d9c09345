// The `trnsim._core` extension module: Python bindings of the C++ simulator, torch-free: chips,
// enums, the kernel builder and devices, the graph compiler (_compiler) and the profiler (_profiler).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/interrupt.h"

namespace py = pybind11;

namespace trnsim {
void register_kernel_bindings(py::module_& m);    // kernel_bindings.cpp
void register_enum_bindings(py::module_& m);      // enum_bindings.cpp
void register_compiler_bindings(py::module_& m);  // compiler_bindings.cpp
void register_profiler_bindings(py::module_& m);  // profiler_bindings.cpp
}

namespace {

// Names of the chip presets (configs/chips/<name>.yaml), sorted.
std::vector<std::string> chip_presets() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(trnsim::chip_config_dir()))
        if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

// The numbers of a chip preset that reports and roofline analyses need. Per-core figures
// are for one physical NeuronCore (what one simulated device executes on).
py::dict chip_info(const std::string& name_or_path) {
    const trnsim::ChipConfig c = trnsim::load_chip(name_or_path);
    py::dict d;
    d["name"] = c.name;
    d["source_file"] = c.source_file;
    d["generation"] = c.generation;
    d["physical_cores"] = c.physical_cores;
    d["lnc"] = c.lnc;
    d["logical_cores"] = c.logical_cores();
    d["peak_flops_bf16_per_core"] = c.peak_flops_bf16();
    d["peak_flops_fp8_per_core"] = c.peak_flops_fp8();
    d["peak_flops_fp32_per_core"] = c.peak_flops_fp32();
    d["hbm_bytes_per_s_per_core"] = c.hbm_bytes_per_ns_per_core() * 1e9;
    d["hbm_capacity_bytes_per_core"] = c.hbm_capacity_per_core();
    d["hbm_capacity_bytes"] = c.hbm.capacity_bytes;
    d["hbm_bytes_per_s"] = c.hbm.bandwidth_gbps * 1e9;
    d["sbuf_bytes_per_core"] = uint64_t(c.sbuf.partitions) * c.sbuf.bytes_per_partition;
    d["dma_queues"] = c.dma.queues;
    d["tensor_clock_ghz"] = c.tensor.clock_ghz;
    return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "trnsim simulator core (C++)";
    m.def("version", [] { return std::string(TRNSIM_VERSION); }, "Version of the trnsim C++ core.");
    m.def("chip_presets", &chip_presets, "Names of the chip presets, sorted.");
    m.def("chip_info", &chip_info, py::arg("name_or_path"),
          "Derived numbers of a chip preset or YAML file (peaks per physical NeuronCore and per chip).");
    py::register_exception<trnsim::ConfigError>(m, "ConfigError", PyExc_ValueError);
    // A run stopped by interrupt_runs() (Ctrl-C: the SIGINT handler of trnsim._C stops the runs of
    // this module too, see trnsim/interrupt.h) raises KeyboardInterrupt: Python's own once its
    // handler has run, else one naming the run.
    py::register_local_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const trnsim::Interrupted& e) {
            if (PyErr_CheckSignals() == 0) PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
        }
    });
    trnsim::register_enum_bindings(m);
    trnsim::register_kernel_bindings(m);
    trnsim::register_compiler_bindings(m);
    trnsim::register_profiler_bindings(m);
}
