// The c10d backend "neuron": a c10d::Backend whose every collective is carried
// out by a Python object (python/trnsim/distributed/backend.py). c10d does not
// let Python subclass Backend, only ProcessGroup, and a ProcessGroup subclass
// would replace the whole group (no "cpu:gloo,neuron:neuron"); this class is
// the missing trampoline. The Python side moves the values (through gloo, on
// CPU aliases of device memory) and times the collective on the topology.
//
// Also here: the device clock hooks the collectives use (a collective's end
// time becomes the device's and/or the issuing stream's time) and CPU aliases
// of neuron tensors (device memory is host memory in the simulator).
#include "distributed/backend.h"

#include <ATen/ATen.h>
#include <Python.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/devices.h"
#include "runtime/streams.h"

namespace py = pybind11;

namespace trnsim::neuron {
namespace {

// A Work returned by the Python side, with the Python object kept alive for as long
// as c10d holds the Work (the object may be a Python subclass of Work).
class HeldWork final : public c10d::Work {
public:
    HeldWork(c10::intrusive_ptr<c10d::Work> work, py::object owner)
        : c10d::Work(-1, work->retrieveOpType()), work_(std::move(work)),
          owner_(std::move(owner)) {}
    ~HeldWork() override {
        if (!Py_IsInitialized()) {
            (void)owner_.release();   // the interpreter is gone: the object goes with it
            return;
        }
        py::gil_scoped_acquire gil;
        owner_ = py::object();
    }
    // A Python Work (trnsim's collectives) reports completion through its future; gloo's
    // send and recv works have no future.
    bool isCompleted() override {
        if (work_->isCompleted()) return true;
        try {
            return work_->getFuture()->completed();
        } catch (const c10::Error&) {
            return false;
        }
    }
    bool isSuccess() const override { return work_->isSuccess(); }
    std::exception_ptr exception() const override { return work_->exception(); }
    // A receive from any source whose Python Work learns the sender when it completes
    // (trnsim's recv_anysource) reports it through recv_source_rank().
    int sourceRank() const override {
        {
            py::gil_scoped_acquire gil;
            if (py::hasattr(owner_, "recv_source_rank")) return owner_.attr("recv_source_rank")().cast<int>();
        }
        return work_->sourceRank();
    }
    std::vector<at::Tensor> result() override { return work_->result(); }
    void synchronize() override { work_->synchronize(); }
    bool wait(std::chrono::milliseconds timeout) override { return work_->wait(timeout); }
    void abort() override { work_->abort(); }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return work_->getFuture(); }

private:
    c10::intrusive_ptr<c10d::Work> work_;
    py::object owner_;
};

// The reduce op as the Python side sees it: (code, PREMUL_SUM's factor as a float or as a
// one-element tensor). Plain C++ values: they are built before the GIL is taken.
using PyReduceOp = std::tuple<int, std::optional<double>, std::optional<at::Tensor>>;

PyReduceOp reduce_op(const c10d::ReduceOp& op) {
    PyReduceOp out{static_cast<int>(op.op_), std::nullopt, std::nullopt};
    if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
        auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
        TORCH_CHECK(s, "neuron backend: PREMUL_SUM without its factor");
        if (s->tensor_factor.defined()) std::get<2>(out) = s->tensor_factor;
        else std::get<1>(out) = s->double_factor;
    }
    return out;
}

int64_t ms(std::chrono::milliseconds t) { return t.count(); }

class NeuronBackend final : public c10d::Backend {
public:
    NeuronBackend(int rank, int size, py::object impl, std::chrono::milliseconds timeout)
        : c10d::Backend(rank, size), impl_(std::move(impl)), timeout_(timeout) {}
    ~NeuronBackend() override {
        if (!Py_IsInitialized()) {
            (void)impl_.release();
            return;
        }
        py::gil_scoped_acquire gil;
        impl_ = py::object();
    }

    const std::string getBackendName() const override { return "neuron"; }
    c10::intrusive_ptr<Options> getBackendOptions() override {
        return c10::make_intrusive<Options>("neuron", timeout_);
    }
    void setTimeout(std::chrono::milliseconds timeout) override {
        timeout_ = timeout;
        call("set_timeout", ms(timeout));
    }
    bool supportsCoalescing() const override { return false; }
    bool supportsSplitting() const override { return false; }
    void setSequenceNumberForGroup() override {}
    uint64_t getSequenceNumberForGroup() override {
        py::gil_scoped_acquire gil;
        return impl_.attr("sequence_number").cast<uint64_t>();
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) override {
        return call("broadcast", t, o.rootRank, o.rootTensor, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) override {
        return call("allreduce", t, reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t,
                                                       const c10d::AllreduceCoalescedOptions& o) override {
        return call("allreduce_coalesced", t, reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) override {
        return call("reduce", t, o.rootRank, o.rootTensor, reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                             const c10d::AllgatherOptions& o) override {
        return call("allgather", out, in, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                   const c10d::AllgatherOptions& o) override {
        return call("allgather_into_tensor_coalesced", std::vector<at::Tensor>{out}, std::vector<at::Tensor>{in},
                    o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                       std::vector<at::Tensor>& in,
                                                       const c10d::AllgatherOptions& o) override {
        return call("allgather_coalesced", out, in, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                   std::vector<at::Tensor>& in,
                                                                   const c10d::AllgatherOptions& o) override {
        return call("allgather_into_tensor_coalesced", out, in, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                          const c10d::GatherOptions& o) override {
        return call("gather", out, in, o.rootRank, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                           const c10d::ScatterOptions& o) override {
        return call("scatter", out, in, o.rootRank, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out,
                                                  std::vector<std::vector<at::Tensor>>& in,
                                                  const c10d::ReduceScatterOptions& o) override {
        return call("reduce_scatter", out, in, reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                        const c10d::ReduceScatterOptions& o) override {
        return call("reduce_scatter_tensor_coalesced", std::vector<at::Tensor>{out}, std::vector<at::Tensor>{in},
                    reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                   std::vector<at::Tensor>& in,
                                                                   const c10d::ReduceScatterOptions& o) override {
        return call("reduce_scatter_tensor_coalesced", out, in, reduce_op(o.reduceOp), o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                                 std::vector<int64_t>& in_splits,
                                                 const c10d::AllToAllOptions& o) override {
        return call("alltoall_base", out, in, out_splits, in_splits, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                            const c10d::AllToAllOptions& o) override {
        return call("alltoall", out, in, o.asyncOp, ms(o.timeout));
    }
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) override {
        return call("send", t, dst, tag);
    }
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) override {
        return call("recv", t, src, tag);
    }
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override {
        return call("recv_anysource", t, tag);
    }
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
        std::vector<int64_t> ids(o.device_ids.begin(), o.device_ids.end());
        return call("barrier", ids, ms(o.timeout));
    }
    void abort() override { call("abort"); }
    void shutdown() override { call("shutdown"); }

private:
    template <typename... Args>
    c10::intrusive_ptr<c10d::Work> call(const char* method, Args&&... args) {
        py::gil_scoped_acquire gil;
        py::object result = impl_.attr(method)(std::forward<Args>(args)...);
        if (result.is_none()) return {};
        auto work = result.cast<c10::intrusive_ptr<c10d::Work>>();
        return c10::make_intrusive<HeldWork>(std::move(work), std::move(result));
    }

    py::object impl_;
    std::chrono::milliseconds timeout_;
};

c10::Stream stream_of(int device_index) {
    return current_stream(static_cast<c10::DeviceIndex>(device_index));
}

}  // namespace

void init_distributed_bindings(py::module_& m) {
    py::module_ d = m.def_submodule("_distributed", "the c10d backend of the neuron device");
    py::object backend_base = py::module_::import("torch._C._distributed_c10d").attr("Backend");
    py::class_<NeuronBackend, c10::intrusive_ptr<NeuronBackend>>(d, "NeuronBackend", backend_base)
        .def(py::init([](int rank, int size, py::object impl, int64_t timeout_ms) {
                 return c10::make_intrusive<NeuronBackend>(rank, size, std::move(impl),
                                                           std::chrono::milliseconds(timeout_ms));
             }),
             py::arg("rank"), py::arg("size"), py::arg("impl"), py::arg("timeout_ms"));

    // A CPU tensor over the same memory as a neuron tensor (its strides and offset included). It
    // holds the neuron storage: a send still in flight keeps its memory from being reused.
    d.def("cpu_alias", [](const at::Tensor& t) {
        TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "cpu_alias: not a neuron tensor");
        c10::Storage held = t.storage();
        return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), [held](void*) mutable { held = {}; },
                             t.options().device(at::kCPU));
    });
    // (device time, current stream's time) of device 'index', in ps.
    d.def("clock", [](int index) {
        Device& dev = device(static_cast<c10::DeviceIndex>(index));
        int64_t now;
        {
            auto held = dev.lock();
            now = dev.core().now_ps();
        }
        return py::make_tuple(now, stream_time_ps(stream_of(index)));
    });
    // A blocking collective ended at t_ps: the device and its current stream wait for it.
    d.def("block_until", [](int index, int64_t t_ps) {
        Device& dev = device(static_cast<c10::DeviceIndex>(index));
        {
            auto held = dev.lock();
            dev.core().advance_to(t_ps);
        }
        stream_wait_until(stream_of(index), t_ps);
    });
    // An asynchronous collective ends at t_ps: the current stream's time covers it; work
    // already queued on the device is not held back (it overlaps the collective).
    d.def("stream_until", [](int index, int64_t t_ps) { stream_wait_until(stream_of(index), t_ps); });
}

}  // namespace trnsim::neuron
