// Integer and boolean tensors on neuron: the launches of the exact integer kernels (ops/integer.h).
//
// Launch takes an integer tensor as the u8 bytes of its elements (the same storage: aliasing,
// dense copies and the kernel cache work as for any argument; no int64 range check applies,
// because nothing narrows): each descriptor is turned back into the element dtype before the
// kernel is built.
#include "aten/native/integer.h"

#include <ATen/ATen.h>

#include <deque>

#include "aten/native/launch.h"
#include "aten/native/util.h"

namespace trnsim::neuron::integer {

bool is_int(c10::ScalarType t) {
    switch (t) {
        case c10::kLong: case c10::kInt: case c10::kShort: case c10::kChar: case c10::kByte: case c10::kBool:
            return true;
        default:
            return false;
    }
}

bool int_tensor(const at::Tensor& t) { return t.defined() && t.is_privateuseone() && is_int(t.scalar_type()); }

namespace {

DType element_dtype(c10::ScalarType t) {
    switch (t) {
        case c10::kLong: return DType::i64;
        case c10::kInt: return DType::i32;
        case c10::kShort: return DType::i16;
        case c10::kChar: return DType::i8;
        case c10::kByte: return DType::u8;
        case c10::kBool: return DType::boolean;
        case c10::kFloat: return DType::f32;
        case c10::kBFloat16: return DType::bf16;
        case c10::kHalf: return DType::f16;
        default: break;
    }
    TORCH_CHECK(false, "trnsim: integer kernels do not take dtype ", t);
}

// The u8 bytes of t's elements: same storage, sizes + [element_size], strides in bytes.
at::Tensor bytes_of(const at::Tensor& t) {
    const int64_t es = static_cast<int64_t>(t.element_size());
    c10::SmallVector<int64_t, 6> sizes(t.sizes().begin(), t.sizes().end()), strides;
    for (int64_t s : t.strides()) strides.push_back(s * es);
    sizes.push_back(es);
    strides.push_back(1);
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(),
                                                     caffe2::TypeMeta::Make<uint8_t>());
    impl->set_sizes_and_strides(sizes, strides, t.storage_offset() * es);
    return at::Tensor(std::move(impl));
}

// A descriptor of bytes_of(t) as t's elements.
ops::TensorDesc as_elements(ops::TensorDesc d, DType t) {
    const auto es = static_cast<int64_t>(dtype_size(t));
    d.sizes.pop_back();
    d.strides.pop_back();
    for (int64_t& s : d.strides) s /= es;
    d.offset /= es;
    d.dtype = t;
    return d;
}

// A Launch whose tensor arguments travel as their bytes (see the file comment).
class IntLaunch {
public:
    explicit IntLaunch(const char* op) : l_(op) {}
    IntLaunch& out(const at::Tensor& t) { return add(t, true); }
    IntLaunch& in(const at::Tensor& t) { return add(t, false); }
    IntLaunch& scalar(int64_t v) {
        l_.scalar(v);
        return *this;
    }
    template <class Build>
    void run(Build&& build) {
        l_.run([&](KernelBuilder& kb, const Descs& d) {
            Descs e;
            for (size_t i = 0; i < d.size(); ++i) e.push_back(as_elements(d[i], dtypes_[i]));
            build(kb, const_cast<const Descs&>(e));
        });
    }

private:
    IntLaunch& add(const at::Tensor& t, bool is_out) {
        views_.push_back(bytes_of(t));
        dtypes_.push_back(element_dtype(t.scalar_type()));
        l_.scalar(static_cast<int64_t>(t.scalar_type()));
        if (is_out) l_.out(views_.back());
        else l_.in(views_.back());
        return *this;
    }
    Launch l_;
    std::deque<at::Tensor> views_;   // stable addresses: Launch keeps pointers
    c10::SmallVector<DType, 4> dtypes_;
};

}  // namespace

// ---------------------------------------------------------------- launches

void launch_binary(IntOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    IntLaunch l("int_binary");
    l.out(out).in(a).in(b).scalar(static_cast<int64_t>(op));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_binary(kb, op, d[0], d[1], d[2]); });
}

void launch_binary_scalar(IntOp op, const at::Tensor& out, const at::Tensor& a, int64_t s, bool reverse) {
    IntLaunch l("int_binary_scalar");
    l.out(out).in(a).scalar(static_cast<int64_t>(op)).scalar(s).scalar(reverse);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_binary_scalar(kb, op, d[0], d[1], s, reverse); });
}

void launch_unary(IntOp op, const at::Tensor& out, const at::Tensor& a) {
    IntLaunch l("int_unary");
    l.out(out).in(a).scalar(static_cast<int64_t>(op));
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_unary(kb, op, d[0], d[1]); });
}

void launch_copy(const at::Tensor& out, const at::Tensor& a) {
    IntLaunch l("int_copy");
    l.out(out).in(a);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::copy(kb, d[0], d[1]); });
}

void launch_where(const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
    IntLaunch l("int_where");
    l.out(out).in(cond).in(a).in(b);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_where(kb, d[0], d[1], d[2], d[3]); });
}

void launch_masked_fill(const at::Tensor& out, const at::Tensor& a, const at::Tensor& mask, int64_t value) {
    IntLaunch l("int_masked_fill");
    l.out(out).in(a).in(mask).scalar(value);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_masked_fill(kb, d[0], d[1], d[2], value); });
}

void launch_fill(const at::Tensor& out, int64_t value) {
    IntLaunch l("int_fill");
    l.out(out).scalar(value);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_fill(kb, d[0], value); });
}

void launch_reduce(IntOp op, const at::Tensor& out, const at::Tensor& in, c10::ArrayRef<int64_t> dims) {
    if (in.dim() == 0) {   // a 0-d tensor reduces to itself (all/any: its truth, by the bool store)
        TORCH_CHECK(op != IntOp::argmax && op != IntOp::argmin, "trnsim: argmax of a 0-d tensor is computed by the caller");
        launch_unary(IntOp::copy, out, in);
        return;
    }
    IntLaunch l("int_reduce");
    l.out(out).in(in).scalar(static_cast<int64_t>(op));
    for (int64_t d : dims) l.scalar(d);
    std::vector<int64_t> dv(dims.begin(), dims.end());
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_reduce(kb, op, d[0], d[1], dv); });
}

void launch_scan(IntOp op, const at::Tensor& out, const at::Tensor& in, int64_t dim) {
    IntLaunch l("int_scan");
    l.out(out).in(in).scalar(static_cast<int64_t>(op)).scalar(dim);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_scan(kb, op, d[0], d[1], dim); });
}

void launch_arange(const at::Tensor& out, int64_t start, int64_t step) {
    IntLaunch l("int_arange");
    l.out(out).scalar(start).scalar(step);
    l.run([&](KernelBuilder& kb, const Descs& d) { ops::int_arange(kb, d[0], start, step); });
}

}  // namespace trnsim::neuron::integer
