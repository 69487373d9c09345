// The launch layer between ATen operators and the kernel library (trnsim/ops.h).
//
// An operator describes one kernel call as a Launch: an op code, its tensor
// arguments (in order: they become launch arguments 1, 2, ...) and the scalars
// the kernel bakes in. run() looks the call's signature up in the runtime's
// process-wide ProgramCache (key: op code, per tensor dtype/sizes/strides, which
// arguments share storage, scalars; built from raw bytes, never formatted) and
// only on a miss calls the builder with the arguments' TensorDescs. The Program
// then runs on the device's current stream with each argument's HBM address.
//
// Addresses and offsets: an argument's address is the device address of its
// first element (storage base + storage_offset), so every TensorDesc has
// offset 0 and views at different offsets share one cached Program.
//
// Aliasing: when two arguments share a storage (in-place ops, out= aliasing an
// input) the Program is built with KernelBuilder::set_args_may_alias(true), and
// the key says so.
//
// int64: the ISA has no 64-bit integers. An int64 tensor is passed as the i32
// view of its low words (the same memory, strides doubled, little-endian), so no
// copy is made. Inputs are checked to lie in the i32 range first (a host scan
// of the values: device memory is host-addressable), outside of it the call
// raises. An int64 output (only index results, which are non-negative) gets its
// low words from the kernel and its high words zeroed by a second kernel.
// Integer arithmetic on int64 tensors is not offered natively: those operators
// run on the CPU (the fallback, counted).
//
// Strides a kernel cannot address: a kernel that has no access pattern for an
// argument's strides (NeedsDenseOperand: a matrix broadcast along both dims, a
// view with too many non-mergeable dims, ...) gets a contiguous copy of that
// argument instead, made by the copy kernel, and the call is built again; a
// written argument is copied back after the launch. The signature remembers it,
// so later calls copy first and find the Program in the cache.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "trnsim/ops.h"

namespace trnsim::neuron {

// The kernel dtype holding an ATen dtype (int64 -> i32, see above); nullopt when
// the kernels have none (float64, complex, int8, int16, ...).
std::optional<DType> device_dtype(c10::ScalarType t);

// True when every tensor is a neuron tensor of a dtype the kernels take.
bool kernel_dtypes(std::initializer_list<const at::Tensor*> ts);

using Descs = std::vector<ops::TensorDesc>;

class Launch {
public:
    // 'op' names the kernel family (cache key and Program name prefix): a string literal.
    explicit Launch(const char* op);

    // Appends a tensor argument; returns its launch argument index (1-based).
    uint8_t in(const at::Tensor& t);
    uint8_t out(const at::Tensor& t);
    // Scalars baked into the Program (part of the key).
    Launch& scalar(double v);
    Launch& scalar(int64_t v);

    // Builds (on a cache miss) and launches the kernel; build(kb, descs) writes it, with
    // descs[i] the TensorDesc of argument i+1. Does nothing when the first output is empty.
    template <class Build>
    void run(Build&& build) {
        if (empty_output_) return;
        std::shared_ptr<const Program> prog = cached();
        while (!prog) {
            Descs d = descs();
            KernelBuilder kb = builder();
            try {
                build(kb, const_cast<const Descs&>(d));
            } catch (const NeedsDenseOperand& e) {
                prog = densify(e);
                continue;
            }
            prog = insert(kb);
        }
        launch(*prog);
        write_back_dense();
    }

private:
    struct Arg {
        const at::Tensor* tensor;
        bool is_output;
    };
    void add_bytes(const void* p, size_t n);
    void add_aliasing();
    std::shared_ptr<const Program> cached();
    // Remembers that this signature needs argument e.arg dense, replaces it; the Program of
    // the new signature if one is cached.
    std::shared_ptr<const Program> densify(const NeedsDenseOperand& e);
    void materialise(uint8_t arg);
    void write_back_dense();
    Descs descs() const;
    KernelBuilder builder() const;
    std::shared_ptr<const Program> insert(KernelBuilder& kb);
    void launch(const Program& prog);

    const char* op_;
    c10::SmallVector<Arg, 6> args_;
    c10::SmallVector<char, 256> key_;
    bool empty_output_ = false;
    struct Dense {
        uint8_t arg;
        const at::Tensor* original;
        at::Tensor copy;
    };
    std::list<Dense> dense_;   // stable addresses: args_ point at the copies
};

// Number of Programs in the kernel cache (the runtime's shared ProgramCache).
size_t kernel_cache_size();

// Per-launch trace: while enabled, every kernel launch appends (name, device, start, end)
// with simulated device times in ps.
struct LaunchSlice {
    std::string name;
    int device;
    int64_t start_ps, end_ps;
    uint64_t instructions, flops, hbm_bytes;
};
void set_launch_trace(bool enabled);
std::vector<LaunchSlice> take_launch_trace();

}  // namespace trnsim::neuron
