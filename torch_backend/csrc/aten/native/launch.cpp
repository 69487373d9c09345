#include "aten/native/launch.h"
#include "aten/native/util.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/devices.h"
#include "runtime/streams.h"

namespace trnsim::neuron {
namespace {

struct LaunchTrace {
    std::mutex mutex;
    bool enabled = false;
    std::vector<LaunchSlice> slices;
};

// Signatures whose kernel asked for a dense copy of an argument: key -> that argument.
class DenseArgs {
public:
    std::optional<uint8_t> find(std::string_view key) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = args_.find(key);
        if (it == args_.end()) return std::nullopt;
        return it->second;
    }
    void remember(std::string key, uint8_t arg) {
        std::lock_guard<std::mutex> lock(mutex_);
        args_.emplace(std::move(key), arg);
    }

private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    std::mutex mutex_;
    std::unordered_map<std::string, uint8_t, Hash, std::equal_to<>> args_;
};

DenseArgs& dense_args() {
    static auto* d = new DenseArgs();
    return *d;
}

LaunchTrace& trace() {
    static auto* t = new LaunchTrace();
    return *t;
}

// Raises unless every value of an int64 tensor fits in i32 (the kernels read only the low words).
void check_int32_range(const at::Tensor& t) {
    const auto* base = static_cast<const int64_t*>(t.const_data_ptr());
    const int64_t ndim = t.dim();
    c10::SmallVector<int64_t, 6> index(ndim, 0);
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    for (int64_t n = t.numel(); n > 0; --n) {
        int64_t pos = 0;
        for (int64_t d = 0; d < ndim; ++d) pos += index[d] * strides[d];
        const int64_t v = base[pos];
        TORCH_CHECK(v >= INT32_MIN && v <= INT32_MAX, "trnsim: int64 value ", v,
                    " does not fit the device's 32-bit integers (neuron kernels read int64 tensors as i32)");
        for (int64_t d = ndim - 1; d >= 0; --d) {
            if (++index[d] < sizes[d]) break;
            index[d] = 0;
        }
    }
}

ops::TensorDesc desc_of(const at::Tensor& t, uint8_t arg) {
    ops::TensorDesc d;
    d.arg = arg;
    const bool wide = t.scalar_type() == c10::kLong;
    d.dtype = *device_dtype(t.scalar_type());
    d.sizes.assign(t.sizes().begin(), t.sizes().end());
    d.strides.assign(t.strides().begin(), t.strides().end());
    if (wide)
        for (int64_t& s : d.strides) s *= 2;
    d.offset = 0;
    return d;
}

uint64_t address_of(Device& dev, const at::Tensor& t) {
    // An empty argument may have no storage at all; the kernel reads none of its bytes.
    if (t.numel() == 0 && t.storage().data() == nullptr) return 0;
    return dev.device_addr(t.storage().data()) + static_cast<uint64_t>(t.storage_offset()) * t.element_size();
}

// The high 32-bit words of an int64 tensor, as an i32 tensor over the same memory.
at::Tensor high_words(const at::Tensor& t) {
    c10::SmallVector<int64_t, 6> strides(t.strides().begin(), t.strides().end());
    for (int64_t& s : strides) s *= 2;
    return at::from_blob(static_cast<char*>(t.data_ptr()) + sizeof(int32_t), t.sizes(), strides,
                         at::TensorOptions().dtype(c10::kInt).device(t.device()));
}

void zero_high_words(const at::Tensor& t) {
    at::Tensor high = high_words(t);
    Launch z("zero_high_words");
    z.out(high);
    z.run([](KernelBuilder& kb, const Descs& d) { ops::fill(kb, d[0], 0.0f); });
}

}  // namespace

std::optional<DType> device_dtype(c10::ScalarType t) {
    switch (t) {
        case c10::kFloat: return DType::f32;
        case c10::kBFloat16: return DType::bf16;
        case c10::kHalf: return DType::f16;
        case c10::kFloat8_e4m3fn: return DType::fp8_e4m3;
        case c10::kFloat8_e5m2: return DType::fp8_e5m2;
        case c10::kInt: return DType::i32;
        case c10::kLong: return DType::i32;
        case c10::kByte: return DType::u8;
        case c10::kBool: return DType::boolean;
        default: return std::nullopt;
    }
}

bool kernel_dtypes(std::initializer_list<const at::Tensor*> ts) {
    for (const at::Tensor* t : ts)
        if (!t->is_privateuseone() || !device_dtype(t->scalar_type())) return false;
    return true;
}

Launch::Launch(const char* op) : op_(op) { add_bytes(op, std::strlen(op) + 1); }

void Launch::add_bytes(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    key_.append(c, c + n);
}

uint8_t Launch::in(const at::Tensor& t) {
    TORCH_CHECK(args_.size() < 255, "trnsim: too many kernel arguments for ", op_);
    // Timing-only mode has no values to check.
    if (t.scalar_type() == c10::kLong && !timing_only()) check_int32_range(t);
    args_.push_back({&t, false});
    const uint8_t header[2] = {static_cast<uint8_t>(t.scalar_type()), static_cast<uint8_t>(t.dim())};
    add_bytes(header, 2);
    add_bytes(t.sizes().data(), t.dim() * sizeof(int64_t));
    add_bytes(t.strides().data(), t.dim() * sizeof(int64_t));
    return static_cast<uint8_t>(args_.size());
}

uint8_t Launch::out(const at::Tensor& t) {
    if (t.numel() == 0) empty_output_ = true;
    TORCH_CHECK(args_.size() < 255, "trnsim: too many kernel arguments for ", op_);
    args_.push_back({&t, true});
    const uint8_t header[2] = {static_cast<uint8_t>(t.scalar_type()), static_cast<uint8_t>(t.dim() | 0x80)};
    add_bytes(header, 2);
    add_bytes(t.sizes().data(), t.dim() * sizeof(int64_t));
    add_bytes(t.strides().data(), t.dim() * sizeof(int64_t));
    return static_cast<uint8_t>(args_.size());
}

Launch& Launch::scalar(double v) {
    add_bytes(&v, sizeof v);
    return *this;
}

Launch& Launch::scalar(int64_t v) {
    add_bytes(&v, sizeof v);
    return *this;
}

// Whether any two arguments share a storage: the key's last byte.
void Launch::add_aliasing() {
    const size_t n = args_.size();
    uint8_t aliasing = 0;
    for (size_t i = 0; i < n; ++i)
        for (size_t j = i + 1; j < n; ++j)
            if (args_[i].tensor->storage().is_alias_of(args_[j].tensor->storage())) aliasing = 1;
    add_bytes(&aliasing, 1);
}

std::shared_ptr<const Program> Launch::cached() {
    add_aliasing();
    while (std::optional<uint8_t> arg = dense_args().find(std::string_view(key_.data(), key_.size())))
        materialise(*arg);
    return shared_program_cache().find(std::string_view(key_.data(), key_.size()));
}

std::shared_ptr<const Program> Launch::densify(const NeedsDenseOperand& e) {
    const bool known = e.arg >= 1 && e.arg <= args_.size();
    bool again = false;
    for (const Dense& d : dense_) again = again || d.arg == e.arg;
    // A kernel that refuses a contiguous argument, or names none, is a kernel bug: say so.
    TORCH_CHECK(known && !again, "trnsim: ", e.what());
    dense_args().remember(std::string(key_.data(), key_.size()), e.arg);
    key_.pop_back();   // the aliasing byte: cached() adds it again
    return cached();
}

void Launch::materialise(uint8_t arg) {
    Arg& a = args_[arg - 1];
    const at::Tensor& t = *a.tensor;
    // int64 travels as i32 low words: a contiguous copy in int32 is what the kernels read densely.
    const c10::ScalarType dtype = t.scalar_type() == c10::kLong ? c10::kInt : t.scalar_type();
    at::Tensor copy = at::empty(t.sizes(), t.options().dtype(dtype));
    copy.copy_(t);   // outputs too: in-place kernels read what they write
    dense_.push_back({arg, a.tensor, std::move(copy)});
    a.tensor = &dense_.back().copy;
    key_.pop_back();
    const uint8_t marker[2] = {0xff, arg};
    add_bytes(marker, 2);
    add_aliasing();
}

void Launch::write_back_dense() {
    for (auto it = dense_.rbegin(); it != dense_.rend(); ++it)
        if (args_[it->arg - 1].is_output) it->original->copy_(it->copy);
}

Descs Launch::descs() const {
    Descs d;
    d.reserve(args_.size());
    for (size_t i = 0; i < args_.size(); ++i) d.push_back(desc_of(*args_[i].tensor, static_cast<uint8_t>(i + 1)));
    return d;
}

KernelBuilder Launch::builder() const {
    KernelBuilder kb(chip(), op_, device(args_.front().tensor->device().index()).core().memory().hbm_size());
    kb.set_args_may_alias(key_.back() != 0);   // the aliasing byte cached() appended last
    return kb;
}

std::shared_ptr<const Program> Launch::insert(KernelBuilder& kb) {
    Program prog = kb.finish();
    // The Program takes exactly the arguments it is launched with: finish() counts only those
    // its instructions address, so arguments a kernel never touches need no bytes.
    TORCH_CHECK(prog.num_args() <= args_.size(), "trnsim: kernel ", op_, " addresses argument ",
                prog.num_args(), " but is launched with ", args_.size());
    prog.arg_extent.resize(args_.size(), 0);
    return shared_program_cache().insert(std::string(key_.data(), key_.size()), std::move(prog));
}

void Launch::launch(const Program& prog) {
    const c10::DeviceIndex index = args_.front().tensor->device().index();
    for (const Arg& a : args_)
        TORCH_CHECK(a.tensor->is_privateuseone() && a.tensor->device().index() == index, "trnsim: ", op_,
                    " expects every tensor on neuron:", int(index), ", got one on ", a.tensor->device());
    thread_local std::vector<uint64_t> addresses;
    RunStats stats;
    run_on_current_stream(index, [&](Device& dev) {
        addresses.clear();
        for (const Arg& a : args_) addresses.push_back(address_of(dev, *a.tensor));
        stats = dev.launch(prog, addresses);
    });
    LaunchTrace& t = trace();
    if (t.enabled) {
        std::lock_guard<std::mutex> lock(t.mutex);
        t.slices.push_back({prog.name, int(index), stats.start_ps, stats.end_ps, stats.instructions, stats.flops,
                            stats.hbm_bytes});
    }
    // int64 outputs: zero the high words (index results are non-negative).
    for (const Arg& a : args_)
        if (a.is_output && a.tensor->scalar_type() == c10::kLong) zero_high_words(*a.tensor);
}

size_t kernel_cache_size() { return shared_program_cache().stats().entries; }

void set_launch_trace(bool enabled) {
    LaunchTrace& t = trace();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.enabled = enabled;
}

std::vector<LaunchSlice> take_launch_trace() {
    LaunchTrace& t = trace();
    std::lock_guard<std::mutex> lock(t.mutex);
    return std::exchange(t.slices, {});
}

}  // namespace trnsim::neuron

namespace trnsim::neuron {

double host_scalar_value(const at::Tensor& t) {
    const void* p = t.const_data_ptr();
    switch (t.scalar_type()) {
        case c10::kDouble: return *static_cast<const double*>(p);
        case c10::kFloat: return *static_cast<const float*>(p);
        case c10::kLong: return static_cast<double>(*static_cast<const int64_t*>(p));
        case c10::kInt: return *static_cast<const int32_t*>(p);
        case c10::kBool: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
        case c10::kHalf: return static_cast<float>(*static_cast<const c10::Half*>(p));
        case c10::kBFloat16: return static_cast<float>(*static_cast<const c10::BFloat16*>(p));
        default: return t.item<double>();
    }
}

}  // namespace trnsim::neuron
