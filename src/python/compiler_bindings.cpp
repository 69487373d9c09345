// trnsim._core._compiler: Python builds a compiler::Graph node by node (from an FX graph or by
// hand), compiles it and simulates the compiled program in timing-only mode. Torch-free; the
// PyTorch extension re-exports this module as trnsim._C._compiler and adds the launch of
// compiled segments on neuron devices.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "trnsim/compiler.h"

namespace py = pybind11;

namespace trnsim {
namespace {

using compiler::CompiledGraph;
using compiler::Graph;
using compiler::Op;

Op op_from_name(const std::string& name) {
    for (int i = 0; i < static_cast<int>(Op::count_); ++i)
        if (name == compiler::op_name(static_cast<Op>(i))) return static_cast<Op>(i);
    throw compiler::CompileError("unknown compiler op '" + name + "'");
}

// An empty name is the chip the neuron devices use: $TRNSIM_CHIP, else trn2.
ChipConfig chip_or_default(const std::string& name) {
    if (!name.empty()) return load_chip(name);
    const char* env = std::getenv("TRNSIM_CHIP");
    return load_chip(env && *env ? env : "trn2");
}

py::dict placement_dict(const compiler::Placement& p) {
    py::dict d;
    d["slot"] = p.slot;
    d["byte_offset"] = p.byte_offset;
    d["dtype"] = dtype_name(p.dtype);
    d["sizes"] = p.sizes;
    d["strides"] = p.strides;
    return d;
}

const char* slot_kind_name(compiler::SlotKind k) {
    switch (k) {
        case compiler::SlotKind::input: return "input";
        case compiler::SlotKind::output: return "output";
        case compiler::SlotKind::eager: return "eager";
        case compiler::SlotKind::workspace: return "workspace";
    }
    return "?";
}

// Runs every segment on a fresh NeuronCore of 'chip_name' in timing-only mode (no data): the
// compiled program's device time. Graphs with eager segments cannot be timed this way.
// Returns seconds, matmul_flops, hbm_bytes, instructions, peak_flops_bf16, busy seconds
// per engine ("busy": {"Tensor": s, ..., "DMA": summed over queues}) and, with by_tag,
// busy seconds per kernel tag and engine ("by_tag": {tag: {engine: s, "wall": s}}; wall is the
// time during which at least one of the tag's instructions runs).
py::dict simulate(const CompiledGraph& cg, const std::string& chip_name, bool by_tag) {
    const ChipConfig chip = chip_or_default(chip_name);
    RunStats st;
    std::map<std::string, std::map<std::string, double>> tags;   // by_tag: tag -> engine -> seconds
    auto queue_engine = [](uint32_t q) -> std::string {
        const uint32_t local = queue_local(q);
        return local < kNumEngineQueues ? engine_name(static_cast<Engine>(local)) : "DMA";
    };
    {
        py::gil_scoped_release release;
        NeuronCore core(chip, ExecMode::TimingOnly, 0, chip.lnc);   // one device: a logical core
        std::vector<uint64_t> addrs;
        uint64_t next = 1 << 20;
        for (const auto& slot : cg.memory.slots) {
            addrs.push_back(next);
            next += (static_cast<uint64_t>(slot.bytes) + 4095) / 4096 * 4096 + 4096;
        }
        if (next > core.memory().hbm_size())
            throw compiler::CompileError("simulate: the graph's tensors need " + std::to_string(next) +
                                         " bytes of HBM, the core has " + std::to_string(core.memory().hbm_size()));
        if (!by_tag) {
            st = compiler::run_compiled(core, cg, addrs);
        } else {
            bool first = true;
            for (const auto& seg : cg.segments) {
                if (seg.eager) throw compiler::CompileError("simulate: graph '" + cg.name + "' has eager nodes");
                std::vector<uint64_t> args;
                for (int slot : seg.arg_slots) args.push_back(addrs[slot]);
                std::vector<InstrRecord> records;
                const RunStats seg_stats = core.run(seg.program, &records, args.data(), args.size());
                if (first) st = seg_stats;
                else st.add(seg_stats);
                first = false;
                const auto& names = seg.program.tag_names;
                std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> intervals;
                for (const InstrRecord& r : records) {
                    const std::string& name = r.tag < names.size() ? names[r.tag] : "?";
                    tags[name][queue_engine(r.queue)] += static_cast<double>(r.end_ps - r.start_ps) * 1e-12;
                    intervals[name].emplace_back(r.start_ps, r.end_ps);
                }
                // "wall": the time during which at least one of the tag's instructions runs.
                for (auto& [name, iv] : intervals) {
                    std::sort(iv.begin(), iv.end());
                    int64_t covered = 0, start = iv.front().first, end = iv.front().second;
                    for (const auto& [s, e] : iv) {
                        if (s > end) {
                            covered += end - start;
                            start = s;
                        }
                        end = std::max(end, e);
                    }
                    covered += end - start;
                    tags[name]["wall"] += static_cast<double>(covered) * 1e-12;
                }
            }
        }
    }
    py::dict out;
    out["seconds"] = static_cast<double>(st.duration_ps()) * 1e-12;
    out["matmul_flops"] = static_cast<double>(st.matmul_flops);
    out["hbm_bytes"] = static_cast<double>(st.hbm_bytes);
    out["instructions"] = static_cast<double>(st.instructions);
    out["peak_flops_bf16"] = chip.peak_flops_bf16() * chip.lnc;   // of the device (logical core)
    out["physical_cores"] = chip.lnc;
    out["tensor_busy_seconds"] = static_cast<double>(st.busy_ps[static_cast<int>(Engine::Tensor)]) * 1e-12;
    for (uint32_t c = 0; c < chip.lnc; ++c)
        out[("tensor_busy_seconds_core" + std::to_string(c)).c_str()] =
            static_cast<double>(st.busy_ps[c * kQueuesPerCore + static_cast<int>(Engine::Tensor)]) * 1e-12;
    std::map<std::string, double> busy;
    for (uint32_t q = 0; q < kMaxQueues; ++q) busy[queue_engine(q)] += static_cast<double>(st.busy_ps[q]) * 1e-12;
    out["busy"] = busy;
    if (by_tag) out["by_tag"] = tags;
    return out;
}

}  // namespace

void register_compiler_bindings(py::module_& m) {
    py::module_ sub = m.def_submodule("_compiler", "The trnsim graph compiler");
    py::register_exception<compiler::CompileError>(sub, "CompileError", PyExc_RuntimeError);

    py::enum_<Op> op(sub, "Op", "The graph IR's node kinds (Graph.add_node takes their names).");
    for (int i = 0; i < static_cast<int>(Op::count_); ++i) op.value(compiler::op_name(Op(i)), Op(i));

    py::class_<Graph>(sub, "Graph")
        .def(py::init([](const std::string& name) {
            Graph g;
            g.name = name;
            return g;
        }))
        .def("add_input",
             [](Graph& g, const std::string& dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                int64_t offset, const std::string& name) {
                 return g.add_input(dtype_from_name(dtype), std::move(sizes), std::move(strides), offset, name);
             })
        // outs: list of (dtype name, sizes); attrs: i0, i1, f0, f1, dims, strides, eager_id, label.
        .def("add_node",
             [](Graph& g, const std::string& op, std::vector<int> inputs,
                const std::vector<std::pair<std::string, std::vector<int64_t>>>& outs, int64_t i0, int64_t i1, double f0,
                double f1, std::vector<int64_t> dims, int eager_id, const std::string& label) {
                 compiler::Node n;
                 n.op = op_from_name(op);
                 n.inputs = std::move(inputs);
                 n.i0 = i0;
                 n.i1 = i1;
                 n.f0 = static_cast<float>(f0);
                 n.f1 = static_cast<float>(f1);
                 n.dims = std::move(dims);
                 n.eager_id = eager_id;
                 n.label = label;
                 std::vector<std::pair<DType, std::vector<int64_t>>> o;
                 for (const auto& [dt, sizes] : outs) o.push_back({dtype_from_name(dt), sizes});
                 const int index = g.add_node(std::move(n), o);
                 return g.nodes[index].outputs;
             },
             py::arg("op"), py::arg("inputs"), py::arg("outs"), py::arg("i0") = 0, py::arg("i1") = 0, py::arg("f0") = 0.0,
             py::arg("f1") = 0.0, py::arg("dims") = std::vector<int64_t>{}, py::arg("eager_id") = -1,
             py::arg("label") = "")
        .def("add_view", &Graph::add_view)
        .def("set_dense_strides", &Graph::set_dense_strides)
        .def("place_in", &Graph::place_in)
        .def("set_outputs", &Graph::set_outputs)
        .def("__str__", &Graph::str);

    py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(sub, "CompiledGraph")
        .def_readonly("name", &CompiledGraph::name)
        .def_readonly("ir", &CompiledGraph::ir)
        .def_readonly("compile_seconds", &CompiledGraph::compile_seconds)
        .def_readonly("stats", &CompiledGraph::stats)
        .def_readonly("eager_labels", &CompiledGraph::eager_labels)
        .def("disassembly", &CompiledGraph::disassembly)
        .def(
            "program",
            [](const CompiledGraph& cg, size_t segment) -> const Program& {
                if (segment >= cg.segments.size() || cg.segments[segment].eager)
                    throw compiler::CompileError("program: segment " + std::to_string(segment) + " is not a program");
                return cg.segments[segment].program;
            },
            py::arg("segment"), py::return_value_policy::reference_internal,
            "The program of a program segment (trnsim._core.Program), to launch on a trnsim._core.Device.")
        .def_property_readonly("slots",
                               [](const CompiledGraph& cg) {
                                   py::list l;
                                   for (const auto& s : cg.memory.slots)
                                       l.append(py::make_tuple(slot_kind_name(s.kind), s.bytes, s.index));
                                   return l;
                               })
        .def_property_readonly("outputs",
                               [](const CompiledGraph& cg) {
                                   py::list l;
                                   for (const auto& p : cg.outputs) l.append(placement_dict(p));
                                   return l;
                               })
        // Per segment: ("program", arg_slots, instruction count) or ("eager", node, eager_id, input placements).
        .def_property_readonly("segments", [](const CompiledGraph& cg) {
            py::list l;
            size_t eager = 0;
            for (const auto& s : cg.segments) {
                if (s.eager) {
                    py::list ins;
                    for (const auto& p : cg.eager_inputs[eager]) ins.append(placement_dict(p));
                    l.append(py::make_tuple("eager", s.node, cg.eager_ids[eager], ins));
                    ++eager;
                } else {
                    l.append(py::make_tuple("program", s.arg_slots, s.program.instrs.size()));
                }
            }
            return l;
        });

    sub.def(
        "compile",
        [](Graph g, const std::string& chip, const std::string& dump_dir, bool fuse) {
            compiler::CompileOptions options;
            options.dump_dir = dump_dir;
            options.fuse = fuse;
            const ChipConfig c = chip_or_default(chip);
            py::gil_scoped_release release;
            return std::make_shared<CompiledGraph>(compiler::compile(std::move(g), c, options));
        },
        py::arg("graph"), py::arg("chip") = "", py::arg("dump_dir") = "", py::arg("fuse") = true,
        "Compiles a graph for a chip preset or YAML file (empty: $TRNSIM_CHIP, else trn2).");

    sub.def("simulate", &simulate, py::arg("compiled"), py::arg("chip") = "", py::arg("by_tag") = false,
            "Device time of a compiled graph without eager nodes on a fresh timing-only NeuronCore.");
}

}  // namespace trnsim
