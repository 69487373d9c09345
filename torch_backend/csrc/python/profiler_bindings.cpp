// trnsim._C._profiler: a trnsim::profiler::Profiler attached to the neuron
// devices (the Device objects live in this extension, so the profiler that
// records them is bound here). Used by python/trnsim/profiler.py. What reads a
// recorded profile needs no torch: those methods are trnsim._core._profiler's.
#include "python/profiler_bindings.h"

#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "profiler/launch_recording.h"
#include "profiler/op_observer.h"
#include "runtime/devices.h"
#include "trnsim/profiler.h"

namespace py = pybind11;

namespace trnsim::neuron {
namespace {

using profiler::Profiler;
using profiler::ScopeKind;

ScopeKind scope_kind(const std::string& kind) {
    if (kind == "module") return ScopeKind::Module;
    if (kind == "user") return ScopeKind::User;
    if (kind == "phase") return ScopeKind::Phase;
    throw std::invalid_argument("profiler: unknown scope kind '" + kind + "' (module, user or phase)");
}

Device& device_at(int index) { return device(static_cast<c10::DeviceIndex>(index)); }

}  // namespace

void init_profiler_bindings(py::module_& m) {
    py::module_ sub = m.def_submodule("_profiler", "Profiler of the neuron devices' executed instructions");
    // Deleting a profiler also detaches it (a profile left without detach_all()).
    py::class_<Profiler, std::unique_ptr<Profiler, launch_recording::DetachingDelete>> cls(sub, "Profiler");
    cls.def(py::init<>())
        // Through launch_recording, so that torch.profiler can record the same devices meanwhile.
        .def("attach", [](Profiler& p, int index) { launch_recording::attach_profiler(p, device_at(index)); })
        .def("detach_all", [](Profiler& p) { launch_recording::detach_profiler(p); })
        .def("push_scope", [](Profiler& p, int index, const std::string& name, const std::string& kind) {
            return p.push_scope(device_at(index), name, scope_kind(kind));
        })
        .def("pop_scope", [](Profiler& p, int index, uint32_t id) { p.pop_scope(device_at(index), id); })
        .def("observe_ops", [](Profiler& p, bool on) {
            if (on) op_observer::start(p);
            else op_observer::stop();
        }, "Label launches with the ATen operator issuing them and count forward FLOPs.")
        .def_static("set_in_backward", &op_observer::set_in_backward)
        .def_static("forward_flops", &op_observer::forward_flops)
        .def("now_ps", [](Profiler&, int index) { return device_at(index).now_ps(); });
    // The readers: trnsim._core._profiler.Profiler.<name>, called with this profiler as self.
    for (const char* name : {"intern", "launch_count", "instruction_count", "devices", "chip", "launches", "summarize",
                             "queue_utilisation", "hbm_bytes_timeline", "write_chrome_trace"})
        cls.def(name, [name](const py::object& self, const py::args& args, const py::kwargs& kwargs) {
            py::object reader = py::module_::import("trnsim._core").attr("_profiler").attr("Profiler").attr(name);
            return reader(self, *args, **kwargs);
        });
}

}  // namespace trnsim::neuron
