// lower_to_program: emits the scheduled graph into KernelBuilders. Unfused nodes become the
// operator library's kernels (the same ones eager execution runs), fused nodes the compiler's
// fused kernels. Every run of lowered nodes between two eager nodes is one Program; a graph
// without eager nodes is exactly one (unless it touches more slots than a Program has
// launch arguments, when the run is cut where the next node would not fit, or after an
// attention kernel, see keeps_its_tiles).
#include <memory>

#include "trnsim/ops/matmul_kernel.h"
#include "passes.h"

namespace trnsim::compiler {

namespace {

constexpr size_t kMaxArgs = 255;   // AccessPattern::arg is one byte, 0 = absolute

// 4-D [B, H, S, D] view of an attention operand (leading dims merged or padded with size 1).
ops::TensorDesc as_heads(ops::TensorDesc t, size_t keep_dims) {
    while (t.sizes.size() < keep_dims) {
        t.sizes.insert(t.sizes.begin(), 1);
        t.strides.insert(t.strides.begin(), 0);
    }
    while (t.sizes.size() > keep_dims) {
        if (t.strides[0] != t.strides[1] * t.sizes[1] && t.sizes[0] != 1 && t.sizes[1] != 1)
            throw CompileError("attention: leading dims of " + t.str() + " cannot be merged");
        const int64_t stride = t.sizes[1] == 1 ? t.strides[0] : t.strides[1];
        t.sizes[1] *= t.sizes[0];
        t.strides[1] = stride;
        t.sizes.erase(t.sizes.begin());
        t.strides.erase(t.strides.begin());
    }
    return t;
}

// The library's attention kernels (ops::sdpa_forward/backward) keep their SBUF and PSUM tiles
// allocated when they return; a kernel emitted after them in the same builder would find
// PSUM full, so each of them ends its program.
bool keeps_its_tiles(Op op) { return op == Op::attention || op == Op::attention_backward; }

class Lowering {
public:
    Lowering(const Graph& g, const MemoryPlan& plan, const ChipConfig& chip) : g_(g), plan_(plan), chip_(chip) {}

    std::vector<Segment> run() {
        for (size_t i = 0; i < g_.nodes.size(); ++i) {
            const Node& n = g_.nodes[i];
            if (n.dead || n.op == Op::view) continue;
            if (n.op == Op::eager) {
                flush();
                Segment s;
                s.eager = true;
                s.node = static_cast<int>(i);
                segments_.push_back(std::move(s));
                continue;
            }
            if (!fits(n)) flush();
            if (!kb_) start();
            kb_->set_tag(kb_->tag(std::string(op_name(n.op)) + (n.label.empty() ? "" : "<" + n.label + ">")));
            try {
                emit(n);
            } catch (const std::exception& e) {
                throw CompileError("lowering node " + std::to_string(i) + " (" + op_name(n.op) +
                                   (n.label.empty() ? "" : "<" + n.label + ">") + ") of '" + g_.name + "': " + e.what());
            }
            if (keeps_its_tiles(n.op)) flush();
        }
        flush();
        return std::move(segments_);
    }

private:
    void start() {
        kb_ = std::make_unique<KernelBuilder>(chip_, g_.name + "." + std::to_string(segments_.size()));
        arg_slots_.clear();
    }

    void flush() {
        if (!kb_) return;
        Segment s;
        s.program = kb_->finish();
        s.arg_slots = arg_slots_;
        segments_.push_back(std::move(s));
        kb_.reset();
    }

    // Whether the node's slots fit the current program's launch arguments.
    bool fits(const Node& n) const {
        if (!kb_) return true;
        std::vector<int> extra;
        auto count = [&](int v) {
            const int slot = plan_.storage_slot[g_.values[v].storage];
            if (std::find(arg_slots_.begin(), arg_slots_.end(), slot) == arg_slots_.end() &&
                std::find(extra.begin(), extra.end(), slot) == extra.end())
                extra.push_back(slot);
        };
        for (int v : n.inputs) count(v);
        for (int v : n.outputs) count(v);
        return arg_slots_.size() + extra.size() <= kMaxArgs;
    }

    ops::TensorDesc desc(int v) {
        const Placement p = plan_.place(g_, v);
        if (p.slot < 0) throw CompileError("value %" + std::to_string(v) + " has no storage");
        auto it = std::find(arg_slots_.begin(), arg_slots_.end(), p.slot);
        if (it == arg_slots_.end()) {
            arg_slots_.push_back(p.slot);
            it = arg_slots_.end() - 1;
        }
        ops::TensorDesc t;
        t.arg = static_cast<uint8_t>(it - arg_slots_.begin() + 1);
        t.dtype = p.dtype;
        t.sizes = p.sizes;
        t.strides = p.strides;
        const int64_t elem = static_cast<int64_t>(dtype_size(p.dtype));
        if (p.byte_offset % elem != 0) throw CompileError("value %" + std::to_string(v) + " is misaligned in its slot");
        t.offset = p.byte_offset / elem;
        return t;
    }

    std::vector<ops::TensorDesc> descs(const std::vector<int>& vs) {
        std::vector<ops::TensorDesc> out;
        for (int v : vs) out.push_back(desc(v));
        return out;
    }

    void emit(const Node& n) {
        KernelBuilder& kb = *kb_;
        const std::vector<ops::TensorDesc> in = descs(n.inputs), out = descs(n.outputs);
        switch (n.op) {
            case Op::copy: ops::copy(kb, out[0], in[0]); return;
            case Op::fill: ops::fill(kb, out[0], n.f0); return;
            case Op::concat: {   // each input copied into its slice of the output
                int64_t start = 0;
                for (const ops::TensorDesc& piece : in) {
                    ops::TensorDesc slice = out[0];
                    slice.sizes[n.i0] = piece.sizes[n.i0];
                    slice.offset += start * out[0].strides[n.i0];
                    start += piece.sizes[n.i0];
                    ops::copy(kb, slice, piece);
                }
                return;
            }
            case Op::unary: ops::unary(kb, static_cast<ops::Unary>(n.i0), out[0], in[0]); return;
            case Op::binary: ops::binary(kb, static_cast<ops::Binary>(n.i0), out[0], in[0], in[1], n.f0); return;
            case Op::binary_scalar:
                ops::binary_scalar(kb, static_cast<ops::Binary>(n.i0), out[0], in[0], n.f0, n.i1 != 0);
                return;
            case Op::where: ops::where(kb, out[0], in[0], in[1], in[2]); return;
            case Op::activation_backward:
                ops::activation_backward(kb, static_cast<ops::ActivationGrad>(n.i0), out[0], in[0], in[1], n.f0);
                return;
            case Op::reduce: ops::reduce(kb, static_cast<ops::Reduce>(n.i0), out[0], in[0], n.dims); return;
            case Op::softmax: ops::softmax(kb, out[0], in[0], n.i0, n.i1 != 0); return;
            case Op::softmax_backward: ops::softmax_backward(kb, out[0], in[0], in[1], n.i0, n.i1 != 0); return;
            case Op::layer_norm: {
                const ops::TensorDesc* w = (n.i1 & 1) ? &in[1] : nullptr;
                const ops::TensorDesc* b = (n.i1 & 2) ? &in[(n.i1 & 1) ? 2 : 1] : nullptr;
                ops::layer_norm(kb, out[0], &out[1], &out[2], in[0], w, b, n.i0, n.f0);
                return;
            }
            case Op::layer_norm_backward: {
                // i1 bits 0..2: grad_in, grad_weight, grad_bias present (in that order); bit 3: weight
                // input; bit 4: grad_in addend (the last input). grad_in and the addend may be contiguous
                // tensors of another shape (fuse_norm): they are read in x's shape.
                auto in_x_shape = [&](const ops::TensorDesc& t) {
                    if (t.sizes == in[1].sizes) return t;
                    ops::TensorDesc r = ops::TensorDesc::contiguous(t.arg, t.dtype, in[1].sizes);
                    r.offset = t.offset;
                    return r;
                };
                std::vector<ops::TensorDesc> outs_x = out;
                if (n.i1 & 1) outs_x[0] = in_x_shape(out[0]);
                const ops::TensorDesc* outs[3] = {nullptr, nullptr, nullptr};
                size_t k = 0;
                for (int b = 0; b < 3; ++b)
                    if (n.i1 & (1 << b)) outs[b] = &outs_x[k++];
                const ops::TensorDesc* w = (n.i1 & 8) ? &in[4] : nullptr;
                ops::TensorDesc addend;
                if (n.i1 & 16) addend = in_x_shape(in.back());
                ops::layer_norm_backward(kb, outs[0], outs[1], outs[2], in[0], in[1], in[2], in[3], w, n.i0,
                                         (n.i1 & 16) ? &addend : nullptr);
                return;
            }
            case Op::rms_norm:
                ops::rms_norm(kb, out[0], &out[1], in[0], n.i1 ? &in[1] : nullptr, n.i0, n.f0);
                return;
            case Op::matmul:
                if (in[0].dim() == 2 && in[1].dim() == 2) ops::mm(kb, out[0], in[0], in[1]);
                else ops::bmm(kb, out[0], in[0], in[1]);
                return;
            case Op::addmm:
                if (in[1].dim() == 2 && in[2].dim() == 2) ops::addmm(kb, out[0], in[0], in[1], in[2], n.f1, n.f0);
                else ops::baddbmm(kb, out[0], in[0], in[1], in[2], n.f1, n.f0);
                return;
            case Op::attention:   // in[3], when present: the mask, broadcast to [B, H, Sq, Skv] by the kernel
                ops::sdpa_forward(kb, as_heads(out[0], 4), as_heads(out[1], 3), as_heads(in[0], 4), as_heads(in[1], 4),
                                  as_heads(in[2], 4), in.size() > 3 ? &in[3] : nullptr, n.i0 != 0, n.f0);
                return;
            case Op::attention_backward:   // in[6], when present: the mask
                ops::sdpa_backward(kb, as_heads(out[0], 4), as_heads(out[1], 4), as_heads(out[2], 4), as_heads(in[0], 4),
                                   as_heads(in[1], 4), as_heads(in[2], 4), as_heads(in[3], 4), as_heads(in[4], 4),
                                   as_heads(in[5], 3), in.size() > 6 ? &in[6] : nullptr, n.i0 != 0, n.f0);
                return;
            case Op::fused_elementwise: build_fused_elementwise(kb, n, in, out); return;
            case Op::fused_matmul: build_fused_matmul(kb, n, in, out); return;
            case Op::view:
            case Op::eager:
            case Op::count_: break;
        }
        throw CompileError(std::string("lower_to_program: no lowering for ") + op_name(n.op));
    }

    const Graph& g_;
    const MemoryPlan& plan_;
    const ChipConfig& chip_;
    std::unique_ptr<KernelBuilder> kb_;
    std::vector<int> arg_slots_;
    std::vector<Segment> segments_;
};

}  // namespace

std::vector<Segment> lower_to_program(const Graph& g, const MemoryPlan& plan, const ChipConfig& chip) {
    return Lowering(g, plan, chip).run();
}

RunStats run_compiled(NeuronCore& core, const CompiledGraph& cg, const std::vector<uint64_t>& slot_addrs,
                      std::vector<InstrRecord>* records) {
    if (slot_addrs.size() != cg.memory.slots.size())
        throw CompileError("run_compiled: " + std::to_string(slot_addrs.size()) + " slot addresses for " +
                           std::to_string(cg.memory.slots.size()) + " slots");
    RunStats total;
    bool first = true;
    for (const Segment& s : cg.segments) {
        if (s.eager) throw CompileError("run_compiled: graph '" + cg.name + "' has eager nodes; the host must run it");
        std::vector<uint64_t> args;
        for (int slot : s.arg_slots) args.push_back(slot_addrs[slot]);
        const RunStats st = core.run(s.program, records, args.data(), args.size());
        if (first) total = st;
        else total.add(st);
        first = false;
    }
    return total;
}

}  // namespace trnsim::compiler
