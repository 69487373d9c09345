// trnsim._core._profiler: a trnsim::profiler::Profiler of trnsim._core.Device objects, and what
// reads a recorded profile (summaries, launches, utilisation, the Chrome trace). Torch-free; the
// PyTorch extension's profiler of the neuron devices (trnsim._C._profiler.Profiler) records
// through its own bindings and reads through these: the readers take either profiler.
#include <pybind11/conduit/pybind11_conduit_v1.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "trnsim/profiler.h"

namespace py = pybind11;

namespace trnsim {
namespace {

using profiler::Profiler;
using profiler::ScopeKind;

// The Profiler behind a trnsim._core or a trnsim._C profiler object (the two extension modules
// share C++ objects through pybind11's conduit, which checks the type and the C++ ABI).
Profiler& profiler_of(const py::handle& self) {
    if (auto* p = pybind11_conduit_v1::get_type_pointer_ephemeral<Profiler>(self.ptr())) return *p;
    PyErr_Clear();
    throw py::type_error("expected a trnsim profiler, got " + std::string(py::str(py::type::of(self))));
}

py::dict totals_dict(const profiler::Totals& t) {
    py::dict d;
    d["launches"] = t.launches;
    d["instructions"] = t.instructions;
    d["time_ps"] = t.time_ps;
    d["flops"] = t.flops;
    d["matmul_flops"] = t.matmul_flops;
    d["hbm_bytes"] = t.hbm_bytes;
    return d;
}

py::dict window_dict(const profiler::WindowSummary& w) {
    py::dict d;
    d["start_ps"] = w.start_ps;
    d["end_ps"] = w.end_ps;
    d["totals"] = totals_dict(w.totals);
    py::dict busy;
    for (uint32_t q = 0; q < kMaxQueues; ++q)
        if (w.busy_ps[q]) busy[py::str(profiler::queue_name(q))] = w.busy_ps[q];
    d["busy_ps"] = busy;
    d["peak_sbuf_bytes"] = w.peak_sbuf_bytes;
    py::list rows;
    for (const profiler::OpRow& r : w.rows) {
        py::dict row = totals_dict(r.totals);
        row["op"] = r.op;
        row["scope"] = r.scope;
        rows.append(row);
    }
    d["rows"] = rows;
    return d;
}

// The peaks of one device: a logical NeuronCore, lnc physical cores.
py::dict chip_dict(const py::object& self, int index) {
    const ChipConfig* chip = profiler_of(self).chip(index);
    if (!chip) throw std::invalid_argument("profiler: device " + std::to_string(index) + " was not recorded");
    const double lnc = chip->lnc;
    py::dict d;
    d["name"] = chip->name;
    d["lnc"] = chip->lnc;
    d["peak_flops_bf16"] = lnc * chip->peak_flops_bf16();
    d["peak_flops_fp8"] = lnc * chip->peak_flops_fp8();
    d["peak_flops_fp32"] = lnc * chip->peak_flops_fp32();
    d["hbm_bytes_per_s"] = lnc * chip->hbm_bytes_per_ns_per_core() * 1e9;
    d["hbm_capacity_bytes"] = chip->hbm_capacity_per_logical_core();
    return d;
}

// (op, scope, start_ps, end_ps, flops, matmul_flops, hbm_bytes) per launch of the device.
py::list launches_list(const py::object& self, int index) {
    const Profiler& p = profiler_of(self);
    py::list out;
    for (const profiler::LaunchEvent& l : p.launches()) {
        if (l.device != index) continue;
        profiler::Totals t;
        t.add_launch(l, p.records().data());
        out.append(py::make_tuple(p.strings().str(l.name), p.strings().str(l.scope), l.start_ps, l.end_ps, t.flops,
                                  t.matmul_flops, t.hbm_bytes));
    }
    return out;
}

py::dict queue_utilisation(const py::object& self, int index, int64_t t0, int64_t t1, int bins) {
    py::dict out;
    auto util = profiler_of(self).queue_utilisation(index, t0, t1, bins);
    for (uint32_t q = 0; q < kMaxQueues; ++q) {
        bool any = false;
        for (double v : util[q]) any = any || v > 0;
        if (any || q < 4) out[py::str(profiler::queue_name(q))] = util[q];
    }
    return out;
}

// Binds the readers as methods of 'cls' (the self argument is any trnsim profiler object).
template <class Class>
void def_readers(Class& cls) {
    cls.def("intern", [](const py::object& self, const std::string& s) { return profiler_of(self).intern(s); })
        .def("launch_count", [](const py::object& self) { return profiler_of(self).launch_count(); })
        .def("instruction_count", [](const py::object& self) { return profiler_of(self).records().size(); })
        .def("devices", [](const py::object& self) { return profiler_of(self).devices(); })
        .def("chip", &chip_dict)
        .def("launches", &launches_list)
        .def("summarize",
             [](const py::object& self, int index, int64_t t0, int64_t t1) {
                 return window_dict(profiler_of(self).summarize(index, t0, t1));
             })
        .def("queue_utilisation", &queue_utilisation)
        .def("hbm_bytes_timeline",
             [](const py::object& self, int index, int64_t t0, int64_t t1, int bins) {
                 return profiler_of(self).hbm_bytes_timeline(index, t0, t1, bins);
             })
        .def(
            "write_chrome_trace",
            [](const py::object& self, const std::string& path, bool instructions, int counter_bins) {
                const Profiler& p = profiler_of(self);
                py::gil_scoped_release release;
                p.write_chrome_trace(path, profiler::TraceOptions{instructions, counter_bins});
            },
            py::arg("path"), py::arg("instructions") = true, py::arg("counter_bins") = 2000);
}

}  // namespace

void register_profiler_bindings(py::module_& m) {
    py::module_ sub = m.def_submodule("_profiler", "Profiler of simulated devices' executed instructions");
    py::enum_<ScopeKind> kind(sub, "ScopeKind", "What kind of host activity a scope is.");
    for (ScopeKind k : {ScopeKind::Module, ScopeKind::User, ScopeKind::Phase}) kind.value(profiler::scope_kind_name(k), k);

    // Deleting a profiler also detaches it; a device stays alive while a profiler records it.
    py::class_<Profiler> cls(sub, "Profiler", "Records what trnsim._core.Device objects execute.");
    cls.def(py::init<>())
        .def("attach", &Profiler::attach, py::arg("device"), py::keep_alive<1, 2>())
        .def("detach_all", &Profiler::detach_all)
        .def("push_scope",
             [](Profiler& p, Device& device, const std::string& name, ScopeKind kind) {
                 return p.push_scope(device, name, kind);
             },
             py::arg("device"), py::arg("name"), py::arg("kind") = ScopeKind::User)
        .def("pop_scope", &Profiler::pop_scope, py::arg("device"), py::arg("id"));
    def_readers(cls);
}

}  // namespace trnsim
