// `trnsim._core` bindings of the kernel builder, programs, one simulated NeuronCore and a device,
// for kernel front ends written in Python (trnsim.nki) and torch-free profiles. Deliberately low
// level and torch-free: an access pattern is a plain tuple, enums are integers (their names come
// from isa_names(), or the enums of enum_bindings.cpp), and an
// instruction is emitted through KernelBuilder::emit with its fields as keyword arguments, so
// that new lowerings in Python never need a new binding.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common.h"   // fidelity/kernels: the DMA lowering of NKI's loads and stores
#include "trnsim/kernel.h"
#include "trnsim/runtime.h"
#include "trnsim/sim.h"
#include "trnsim/tiling.h"

namespace py = pybind11;

namespace trnsim {
namespace {

// (space, dtype, start_partition, partitions, offset, partition_stride, sizes, strides, arg)
AccessPattern to_ap(const py::handle& h) {
    if (!py::isinstance<py::tuple>(h)) throw py::type_error("access pattern: expected a tuple");
    const auto t = py::reinterpret_borrow<py::tuple>(h);
    if (t.size() != 9) throw py::value_error("access pattern: expected a 9-tuple");
    AccessPattern ap;
    ap.space = static_cast<MemSpace>(t[0].cast<int>());
    ap.dtype = static_cast<DType>(t[1].cast<int>());
    ap.start_partition = t[2].cast<uint16_t>();
    ap.partitions = t[3].cast<uint16_t>();
    ap.offset = t[4].cast<uint64_t>();
    ap.partition_stride = t[5].cast<int64_t>();
    const auto sizes = py::reinterpret_borrow<py::tuple>(t[6]);
    const auto strides = py::reinterpret_borrow<py::tuple>(t[7]);
    if (sizes.size() < 1 || sizes.size() > kMaxFreeDims || strides.size() != sizes.size())
        throw py::value_error("access pattern: 1 to 4 free sizes with as many strides");
    ap.ndim = static_cast<uint8_t>(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
        ap.size[k] = sizes[k].cast<uint32_t>();
        ap.stride[k] = strides[k].cast<int64_t>();
    }
    ap.arg = t[8].cast<uint8_t>();
    return ap;
}

void set_operand(Instruction& ins, OperandSlot slot, const py::object& o) {
    if (!o.is_none()) operand(ins, slot) = to_ap(o);
}

py::dict isa_names() {
    py::dict d;
    auto names = [](int n, auto fn) {
        py::list l;
        for (int i = 0; i < n; ++i) l.append(fn(i));
        return l;
    };
    d["opcode"] = names(int(Opcode::count_), [](int i) { return opcode_name(Opcode(i)); });
    d["act_func"] = names(int(ActFunc::count_), [](int i) { return act_func_name(ActFunc(i)); });
    d["alu_op"] = names(int(AluOp::count_), [](int i) { return alu_op_name(AluOp(i)); });
    d["reduce_op"] = names(int(ReduceOp::count_), [](int i) { return reduce_op_name(ReduceOp(i)); });
    d["dtype"] = names(int(DType::count_), [](int i) { return dtype_name(DType(i)); });
    d["engine"] = names(int(Engine::DMA) + 1, [](int i) { return engine_name(Engine(i)); });
    d["mem_space"] = names(3, [](int i) { return mem_space_name(MemSpace(i)); });
    py::dict flags;
    flags["accumulate"] = F_ACCUMULATE;
    flags["scale_ap"] = F_SCALE_AP;
    flags["bias_ap"] = F_BIAS_AP;
    flags["s0_ap"] = F_S0_AP;
    flags["s1_ap"] = F_S1_AP;
    flags["reverse0"] = F_REVERSE0;
    flags["reverse1"] = F_REVERSE1;
    flags["acc_out"] = F_ACC_OUT;
    d["flags"] = flags;
    d["num_engine_queues"] = kNumEngineQueues;
    d["queues_per_core"] = kQueuesPerCore;
    return d;
}

// The limits a kernel front end checks tiles against (chip_info has the rates and peaks).
py::dict chip_layout(const std::string& chip) {
    const ChipConfig c = load_chip(chip);
    py::dict d;
    d["name"] = c.name;
    d["generation"] = c.generation;
    d["lnc"] = c.lnc;
    d["sbuf_partitions"] = c.sbuf.partitions;
    d["sbuf_bytes_per_partition"] = c.sbuf.bytes_per_partition;
    d["psum_partitions"] = c.psum.partitions;
    d["psum_bytes_per_partition"] = c.psum.bytes_per_partition;
    d["psum_bank_bytes"] = c.psum.bank_bytes();
    d["psum_banks"] = c.psum.banks;
    d["tensor_rows"] = c.tensor.rows;
    d["tensor_cols"] = c.tensor.cols;
    d["moving_fmax"] = c.tensor.moving_fmax;
    d["dma_queues"] = c.dma.queues;
    d["has_dma_transpose"] = c.dma.transpose_efficiency_hbm > 0 && c.dma.transpose_efficiency_sbuf > 0;
    d["hbm_bytes_per_core"] = c.hbm_capacity_per_core();
    d["launch_overhead_ns"] = c.launch_overhead_ns;   // NEFF start-up in measured kernel latencies
    return d;
}

void check_args(const Program& prog, const std::vector<uint64_t>& args) {
    if (args.size() != prog.num_args())
        throw py::value_error("program " + prog.name + " takes " + std::to_string(prog.num_args()) +
                              " arguments, got " + std::to_string(args.size()));
}

// A run's RunStats: times in ps, busy_ps per queue.
py::dict run_stats_dict(const RunStats& s) {
    py::dict d;
    d["start_ps"] = s.start_ps;
    d["end_ps"] = s.end_ps;
    d["instructions"] = s.instructions;
    d["flops"] = s.flops;
    d["matmul_flops"] = s.matmul_flops;
    d["hbm_bytes"] = s.hbm_bytes;
    d["busy_ps"] = std::vector<int64_t>(s.busy_ps.begin(), s.busy_ps.end());
    return d;
}

// One simulated NeuronCore with its own HBM, for running finished programs on.
class PyCore {
public:
    PyCore(const std::string& chip, bool timing_only, uint64_t hbm_bytes)
        : core_(load_chip(chip), timing_only ? ExecMode::TimingOnly : ExecMode::Functional, hbm_bytes) {}

    void write(uint64_t addr, const py::buffer& b) {
        const py::buffer_info info = b.request();
        const uint64_t n = uint64_t(info.size) * uint64_t(info.itemsize);
        check_range(addr, n);
        if (n) std::memcpy(core_.memory().hbm(addr), info.ptr, n);
    }

    py::bytes read(uint64_t addr, uint64_t n) {
        check_range(addr, n);
        if (!n) return py::bytes();
        return py::bytes(reinterpret_cast<const char*>(core_.memory().hbm(addr)), n);
    }

    py::dict run(const Program& prog, const std::vector<uint64_t>& args, bool with_records) {
        check_args(prog, args);
        std::vector<InstrRecord> records;
        RunStats s;
        {
            py::gil_scoped_release release;
            s = core_.run(prog, with_records ? &records : nullptr, args.data(), args.size());
        }
        py::dict d = run_stats_dict(s);
        if (with_records) d["records"] = records_to_numpy(records);
        return d;
    }

    bool timing_only() const { return core_.mode() == ExecMode::TimingOnly; }
    uint64_t hbm_size() { return core_.memory().hbm_size(); }

private:
    void check_range(uint64_t addr, uint64_t n) {
        if (timing_only()) throw std::runtime_error("the core runs timing-only: its HBM holds no values");
        if (addr + n > core_.memory().hbm_size() || addr + n < addr)
            throw py::value_error("HBM range [" + std::to_string(addr) + ", " + std::to_string(addr + n) +
                                  ") outside the core's " + std::to_string(core_.memory().hbm_size()) + " bytes");
    }

    static py::dict records_to_numpy(const std::vector<InstrRecord>& r) {
        const size_t n = r.size();
        py::array_t<uint32_t> index(n), tag(n);
        py::array_t<uint8_t> op(n), queue(n);
        py::array_t<int64_t> start(n), end(n), throttled(n);
        py::array_t<uint64_t> bytes(n), hbm(n), flops(n);
        auto pi = index.mutable_unchecked<1>();
        auto pt = tag.mutable_unchecked<1>();
        auto po = op.mutable_unchecked<1>();
        auto pq = queue.mutable_unchecked<1>();
        auto ps = start.mutable_unchecked<1>();
        auto pe = end.mutable_unchecked<1>();
        auto pth = throttled.mutable_unchecked<1>();
        auto pb = bytes.mutable_unchecked<1>();
        auto ph = hbm.mutable_unchecked<1>();
        auto pf = flops.mutable_unchecked<1>();
        for (size_t i = 0; i < n; ++i) {
            pi(i) = r[i].index;
            pt(i) = r[i].tag;
            po(i) = static_cast<uint8_t>(r[i].op);
            pq(i) = r[i].queue;
            ps(i) = r[i].start_ps;
            pe(i) = r[i].end_ps;
            pth(i) = r[i].throttled_ps;
            pb(i) = r[i].bytes;
            ph(i) = r[i].hbm_bytes;
            pf(i) = r[i].flops;
        }
        py::dict d;
        d["index"] = index;
        d["tag"] = tag;
        d["op"] = op;
        d["queue"] = queue;
        d["start_ps"] = start;
        d["end_ps"] = end;
        d["throttled_ps"] = throttled;
        d["bytes"] = bytes;
        d["hbm_bytes"] = hbm;
        d["flops"] = flops;
        return d;
    }

    NeuronCore core_;
};

}  // namespace

void register_kernel_bindings(py::module_& m) {
    py::register_exception<IsaError>(m, "IsaError", PyExc_RuntimeError);
    m.def("isa_names", &isa_names,
          "Names of the ISA's enums (index = value): opcode, act_func, alu_op, reduce_op, dtype, engine, mem_space; "
          "and the instruction flag bits.");

    m.def("chip_layout", &chip_layout, py::arg("chip"),
          "SBUF/PSUM geometry, TensorE tile limits and DMA queues of a chip preset or YAML file.");

    py::class_<Program>(m, "Program", "A finished straight-line program for one NeuronCore.")
        .def_property_readonly("name", [](const Program& p) { return p.name; })
        .def("__len__", [](const Program& p) { return p.instrs.size(); })
        .def_property_readonly("tag_names", [](const Program& p) { return p.tag_names; })
        .def_property_readonly("arg_extent", [](const Program& p) { return p.arg_extent; })
        .def("disassemble", [](const Program& p) { return disassemble(p); })
        .def("opcodes", [](const Program& p) {
            py::array_t<uint8_t> a(p.instrs.size());
            auto w = a.mutable_unchecked<1>();
            for (size_t i = 0; i < p.instrs.size(); ++i) w(i) = static_cast<uint8_t>(p.instrs[i].op);
            return a;
        }, "The opcode of each instruction (values of isa_names()['opcode']).");

    py::class_<KernelBuilder>(m, "KernelBuilder",
                              "Builds a program: instructions are validated and ordered by semaphores as emitted.")
        .def(py::init([](const std::string& chip, const std::string& name, uint64_t hbm_bytes) {
                 return KernelBuilder(load_chip(chip), name, hbm_bytes);
             }),
             py::arg("chip"), py::arg("name"), py::arg("hbm_bytes") = 0)
        .def("emit",
             [](KernelBuilder& b, int op, int engine, const py::object& dst, const py::object& src0,
                const py::object& src1, const py::object& src2, const py::object& acc, int func, int alu0, int alu1,
                int reduce, int reduce_ndim, uint32_t flags, float imm0, float imm1, const py::object& affine,
                int dma_queue, uint32_t tag) {
                 if (op < 0 || op >= int(Opcode::count_)) throw py::value_error("emit: invalid opcode");
                 Instruction ins;
                 ins.op = static_cast<Opcode>(op);
                 ins.engine = static_cast<Engine>(engine);
                 ins.dma_queue = static_cast<uint8_t>(dma_queue);
                 ins.func = static_cast<ActFunc>(func);
                 ins.alu0 = static_cast<AluOp>(alu0);
                 ins.alu1 = static_cast<AluOp>(alu1);
                 ins.reduce = static_cast<ReduceOp>(reduce);
                 ins.reduce_ndim = static_cast<uint8_t>(reduce_ndim);
                 ins.flags = flags;
                 ins.imm0 = imm0;
                 ins.imm1 = imm1;
                 ins.tag = tag;
                 set_operand(ins, OperandSlot::dst, dst);
                 set_operand(ins, OperandSlot::src0, src0);
                 set_operand(ins, OperandSlot::src1, src1);
                 set_operand(ins, OperandSlot::src2, src2);
                 set_operand(ins, OperandSlot::acc, acc);
                 if (!affine.is_none()) {  // (base, partition_mul, (free_mul...))
                     const auto t = affine.cast<py::tuple>();
                     ins.affine.base = t[0].cast<int32_t>();
                     ins.affine.partition_mul = t[1].cast<int32_t>();
                     const auto fm = t[2].cast<py::tuple>();
                     for (size_t k = 0; k < fm.size() && k < size_t(kMaxFreeDims); ++k)
                         ins.affine.free_mul[k] = fm[k].cast<int32_t>();
                 }
                 return b.emit(ins);
             },
             py::arg("op"), py::arg("engine"), py::arg("dst") = py::none(), py::arg("src0") = py::none(),
             py::arg("src1") = py::none(), py::arg("src2") = py::none(), py::arg("acc") = py::none(),
             py::arg("func") = 0, py::arg("alu0") = 0, py::arg("alu1") = 0, py::arg("reduce") = 0,
             py::arg("reduce_ndim") = 1, py::arg("flags") = 0, py::arg("imm0") = 0.0f, py::arg("imm1") = 0.0f,
             py::arg("affine") = py::none(), py::arg("dma_queue") = 0, py::arg("tag") = 0,
             "Appends one instruction (validated, dependencies inserted); returns its index. Access patterns are "
             "(space, dtype, start_partition, partitions, offset, partition_stride, sizes, strides, arg) tuples.")
        .def("tag", &KernelBuilder::tag, py::arg("name"), "Labels the instructions emitted next; returns the tag id.")
        .def("set_tag", &KernelBuilder::set_tag, py::arg("tag"), "Labels the instructions emitted next with a tag id.")
        .def("barrier", &KernelBuilder::barrier)
        .def("set_core", &KernelBuilder::set_core, py::arg("core"),
             "Emits what follows on physical core 'core' of the logical core (SPMD, LNC > 1).")
        .def_property_readonly("core", &KernelBuilder::core)
        .def_property_readonly("num_cores", &KernelBuilder::num_cores)
        .def("set_args_may_alias", &KernelBuilder::set_args_may_alias)
        .def("finish", &KernelBuilder::finish)
        .def("__len__", &KernelBuilder::size);

    py::class_<tiling::DmaQueues>(m, "DmaQueues", "The library kernels' DMA queue rotation: loads, then stores.")
        .def(py::init([](const std::string& chip) { return tiling::DmaQueues(load_chip(chip)); }), py::arg("chip"))
        .def("load", &tiling::DmaQueues::load)
        .def("store", &tiling::DmaQueues::store);
    m.def("dma_tile",
          [](KernelBuilder& kb, tiling::DmaQueues& q, const py::tuple& dst, const py::tuple& src, bool store) {
              tiling::dma_tile(kb, q, to_ap(dst), to_ap(src), store);
          },
          py::arg("builder"), py::arg("queues"), py::arg("dst"), py::arg("src"), py::arg("store"),
          "A DMA between SBUF and HBM as the library kernels issue it: large transfers split into partition "
          "groups over several queues.");

    m.def("nki_dma",
          [](KernelBuilder& kb, const py::tuple& dst, const py::tuple& src) {
              fidelity::dma_by_partition(kb, to_ap(dst), to_ap(src));
          },
          py::arg("builder"), py::arg("dst"), py::arg("src"),
          "An HBM <-> SBUF transfer as NKI lowers nl.load / nl.store: partitions 8g..8g+7 of the SBUF side go "
          "through DMA engine g, one dma_copy per engine touched (the lowering the fidelity suite's NKI kernels use).");

    py::class_<PyCore>(m, "Core", "One simulated NeuronCore: HBM access and program runs (functional or timing-only).")
        .def(py::init<const std::string&, bool, uint64_t>(), py::arg("chip"), py::arg("timing_only") = false,
             py::arg("hbm_bytes") = 0)
        .def("write", &PyCore::write, py::arg("addr"), py::arg("data"))
        .def("read", &PyCore::read, py::arg("addr"), py::arg("nbytes"))
        .def("run", &PyCore::run, py::arg("program"), py::arg("args"), py::arg("records") = false,
             "Runs the program after everything run before; returns its RunStats as a dict (times in ps, busy_ps "
             "per queue) and, with records=True, one record per instruction as numpy arrays.")
        .def_property_readonly("timing_only", &PyCore::timing_only)
        .def_property_readonly("hbm_size", &PyCore::hbm_size);

    // What a trnsim._core._profiler.Profiler records; compiled graphs' programs run on it too
    // (CompiledGraph.program).
    py::class_<Device>(m, "Device", "A simulated device: one NeuronCore, its HBM allocator and its clock.")
        .def(py::init([](const std::string& chip, int index, bool timing_only) {
                 return std::make_unique<Device>(load_chip(chip), index,
                                                 timing_only ? ExecMode::TimingOnly : ExecMode::Functional);
             }),
             py::arg("chip"), py::arg("index") = 0, py::arg("timing_only") = true)
        .def_property_readonly("index", &Device::index)
        .def_property_readonly("chip", [](const Device& d) { return d.chip().name; })
        .def_property_readonly("timing_only", [](const Device& d) { return d.mode() == ExecMode::TimingOnly; })
        .def_property_readonly("now_ps", &Device::now_ps, "Device time at which everything run so far has finished.")
        .def("allocate", [](Device& d, uint64_t bytes) { return d.allocator().allocate(bytes); }, py::arg("nbytes"),
             "Allocates HBM; returns its device address.")
        .def("release", [](Device& d, uint64_t addr) { d.allocator().release(addr); }, py::arg("addr"))
        .def("launch",
             [](Device& d, const Program& prog, const std::vector<uint64_t>& args) {
                 check_args(prog, args);
                 RunStats s;
                 {
                     py::gil_scoped_release release;
                     s = d.launch(prog, args);
                 }
                 return run_stats_dict(s);
             },
             py::arg("program"), py::arg("args"),
             "Runs a program after everything launched before (arguments: HBM addresses); returns its RunStats.");
}

}  // namespace trnsim
