// trnsim._C._compiler: trnsim._core._compiler (the graph compiler, torch-free) for torch.compile's
// "neuron" backend, where an empty chip is the neuron devices' chip, and the launch of compiled
// segments on the neuron devices.
#include "python/compiler_bindings.h"

#include <pybind11/conduit/pybind11_conduit_v1.h>
#include <pybind11/stl.h>

#include "runtime/devices.h"
#include "runtime/streams.h"
#include "trnsim/compiler.h"

namespace py = pybind11;

namespace trnsim::neuron {

namespace {

using compiler::CompiledGraph;

py::object core_compiler() { return py::module_::import("trnsim._core").attr("_compiler"); }

// An empty chip name is the chip of the neuron devices (the YAML it was read from).
std::string device_chip(const std::string& chip) { return chip.empty() ? neuron::chip().source_file : chip; }

// The CompiledGraph of a trnsim._core._compiler.CompiledGraph (pybind11's conduit checks the type
// and the C++ ABI of the module that made it).
const CompiledGraph& compiled_graph(const py::handle& o) {
    if (auto* cg = pybind11_conduit_v1::get_type_pointer_ephemeral<CompiledGraph>(o.ptr())) return *cg;
    PyErr_Clear();
    throw py::type_error("expected a trnsim._core._compiler.CompiledGraph (a compiled graph), got " +
                         std::string(py::str(py::type::of(o))));
}

}  // namespace

void init_compiler_bindings(py::module_& m) {
    py::module_ sub = m.def_submodule("_compiler", "The trnsim graph compiler (trnsim._core._compiler) on the neuron devices");
    const py::object core = core_compiler();
    for (const char* name : {"Graph", "CompiledGraph", "CompileError", "Op"}) sub.attr(name) = core.attr(name);
    // The errors of run_segment are the compiler's CompileError too.
    static PyObject* compile_error = py::object(core.attr("CompileError")).release().ptr();   // held for good
    py::register_local_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const compiler::CompileError& e) {
            PyErr_SetString(compile_error, e.what());
        }
    });

    sub.def(
        "compile",
        [](const py::object& graph, const std::string& chip, const std::string& dump_dir, bool fuse) {
            return core_compiler().attr("compile")(graph, device_chip(chip), dump_dir, fuse);
        },
        py::arg("graph"), py::arg("chip") = "", py::arg("dump_dir") = "", py::arg("fuse") = true);

    // Launches program segment 'segment' on neuron:'device' (its current stream); slot_ptrs[k]
    // is the host address of the storage behind slot k (0 for slots the segment does not use).
    sub.def("run_segment", [](const py::object& compiled, size_t segment, int device, const std::vector<uint64_t>& slot_ptrs) {
        const CompiledGraph& cg = compiled_graph(compiled);
        if (segment >= cg.segments.size() || cg.segments[segment].eager)
            throw compiler::CompileError("run_segment: segment " + std::to_string(segment) + " is not a program");
        const compiler::Segment& s = cg.segments[segment];
        const auto index = static_cast<c10::DeviceIndex>(device);
        RunStats stats;
        {
            py::gil_scoped_release release;   // other Python threads run while the device simulates
            run_on_current_stream(index, [&](Device& dev) {
                std::vector<uint64_t> args;
                for (int slot : s.arg_slots)
                    args.push_back(dev.device_addr(reinterpret_cast<const void*>(slot_ptrs.at(slot))));
                stats = dev.launch(s.program, args);
            });
        }
        return py::make_tuple(stats.start_ps, stats.end_ps, stats.matmul_flops, stats.hbm_bytes);
    });

    // trnsim._core._compiler.simulate on the neuron devices' chip by default.
    sub.def(
        "simulate",
        [](const py::object& compiled, const std::string& chip, bool by_tag) {
            return core_compiler().attr("simulate")(compiled, device_chip(chip), by_tag);
        },
        py::arg("compiled"), py::arg("chip") = "", py::arg("by_tag") = false);
}

}  // namespace trnsim::neuron
