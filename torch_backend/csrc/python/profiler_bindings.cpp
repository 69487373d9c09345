// trnsim._C._profiler: a trnsim::profiler::Profiler attached to the neuron
// devices (the Device objects live in this extension, so the profiler that
// records them is bound here). Used by python/trnsim/profiler.py.
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

}  // namespace

void init_profiler_bindings(py::module_& m) {
    py::module_ sub = m.def_submodule("_profiler", "Profiler of the neuron devices' executed instructions");
    // Deleting a profiler also detaches it (a profile left without detach_all()).
    py::class_<Profiler, std::unique_ptr<Profiler, launch_recording::DetachingDelete>>(sub, "Profiler")
        .def(py::init<>())
        // Through launch_recording, so that torch.profiler can record the same devices meanwhile.
        .def("attach", [](Profiler& p, int index) { launch_recording::attach_profiler(p, device_at(index)); })
        .def("detach_all", [](Profiler& p) { launch_recording::detach_profiler(p); })
        .def("push_scope", [](Profiler& p, int index, const std::string& name, const std::string& kind) {
            return p.push_scope(device_at(index), name, scope_kind(kind));
        })
        .def("pop_scope", [](Profiler& p, int index, uint32_t id) { p.pop_scope(device_at(index), id); })
        .def("intern", [](Profiler& p, const std::string& s) { return p.intern(s); })
        .def("observe_ops", [](Profiler& p, bool on) {
            if (on) op_observer::start(p);
            else op_observer::stop();
        }, "Label launches with the ATen operator issuing them and count forward FLOPs.")
        .def_static("set_in_backward", &op_observer::set_in_backward)
        .def_static("forward_flops", &op_observer::forward_flops)
        .def("now_ps", [](Profiler&, int index) { return device_at(index).now_ps(); })
        .def("launch_count", &Profiler::launch_count)
        .def("instruction_count", [](const Profiler& p) { return p.records().size(); })
        .def("devices", &Profiler::devices)
        .def("chip", [](const Profiler& p, int index) {
            // The peaks of one device: a logical NeuronCore, lnc physical cores.
            const ChipConfig* chip = p.chip(index);
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
        })
        .def("launches", [](const Profiler& p, int index) {
            // (op, scope, start_ps, end_ps, flops, matmul_flops, hbm_bytes) per launch of the device.
            py::list out;
            for (const profiler::LaunchEvent& l : p.launches()) {
                if (l.device != index) continue;
                profiler::Totals t;
                t.add_launch(l, p.records().data());
                out.append(py::make_tuple(p.strings().str(l.name), p.strings().str(l.scope), l.start_ps, l.end_ps,
                                          t.flops, t.matmul_flops, t.hbm_bytes));
            }
            return out;
        })
        .def("summarize", [](const Profiler& p, int index, int64_t t0, int64_t t1) {
            return window_dict(p.summarize(index, t0, t1));
        })
        .def("queue_utilisation", [](const Profiler& p, int index, int64_t t0, int64_t t1, int bins) {
            py::dict out;
            auto util = p.queue_utilisation(index, t0, t1, bins);
            for (uint32_t q = 0; q < kMaxQueues; ++q) {
                bool any = false;
                for (double v : util[q]) any = any || v > 0;
                if (any || q < 4) out[py::str(profiler::queue_name(q))] = util[q];
            }
            return out;
        })
        .def("hbm_bytes_timeline", &Profiler::hbm_bytes_timeline)
        .def("write_chrome_trace", [](const Profiler& p, const std::string& path, bool instructions, int counter_bins) {
            py::gil_scoped_release release;
            p.write_chrome_trace(path, profiler::TraceOptions{instructions, counter_bins});
        }, py::arg("path"), py::arg("instructions") = true, py::arg("counter_bins") = 2000);
}

}  // namespace trnsim::neuron
