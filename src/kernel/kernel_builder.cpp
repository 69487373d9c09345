// KernelBuilder: tiles, instruction emitters, and the program being built (allocation in
// tile_allocator.cpp, semaphore insertion in dependency_tracker.cpp).
#include "trnsim/kernel.h"

#include "dependency_tracker.h"
#include "tile_allocator.h"

#include <algorithm>
#include <atomic>
#include <sstream>

namespace trnsim {

// ------------------------------------------------------------------ tiles
uint64_t Tile::bytes_per_partition() const {
    uint64_t n = dtype_size(dtype);
    for (uint32_t s : shape) n *= s;
    return n;
}

static AccessPattern tile_ap(const Tile& t, uint32_t p0, uint32_t np) {
    AccessPattern ap;
    ap.space = t.space;
    ap.dtype = t.dtype;
    ap.start_partition = static_cast<uint16_t>(t.start_partition + p0);
    ap.partitions = static_cast<uint16_t>(np);
    ap.offset = t.offset;
    ap.ndim = static_cast<uint8_t>(t.shape.size());
    int64_t st = 1;
    for (int d = ap.ndim - 1; d >= 0; --d) {
        ap.size[d] = t.shape[d];
        ap.stride[d] = st;
        st *= t.shape[d];
    }
    return ap;
}

AccessPattern Tile::ap() const { return tile_ap(*this, 0, partitions); }

AccessPattern Tile::rows(uint32_t p0, uint32_t n) const {
    if (p0 + n > partitions) throw IsaError("Tile::rows: partition slice out of range");
    return tile_ap(*this, p0, n);
}

AccessPattern Tile::region(uint32_t p0, uint32_t np, uint32_t c0, uint32_t nc) const {
    AccessPattern ap = rows(p0, np);
    int last = ap.ndim - 1;
    if (c0 + nc > ap.size[last]) throw IsaError("Tile::cols: column slice out of range");
    ap.offset += static_cast<uint64_t>(c0) * dtype_size(dtype);
    ap.size[last] = nc;
    return ap;
}

AccessPattern Tile::cols(uint32_t begin, uint32_t count) const { return region(0, partitions, begin, count); }

// ------------------------------------------------------------------ builder
KernelBuilder::KernelBuilder(const ChipConfig& chip, std::string name, uint64_t hbm_bytes)
    : chip_(chip),
      hbm_bytes_(hbm_bytes ? hbm_bytes : chip.hbm_capacity_per_logical_core()),
      deps_(std::make_unique<DependencyTracker>(chip_)),
      tiles_(std::make_unique<TileAllocator>(chip_)) {
    prog_.name = std::move(name);
    prog_.tag_names.push_back(prog_.name);
}

KernelBuilder::~KernelBuilder() = default;
KernelBuilder::KernelBuilder(KernelBuilder&&) noexcept = default;
KernelBuilder& KernelBuilder::operator=(KernelBuilder&&) noexcept = default;

Tile KernelBuilder::alloc_sbuf(uint32_t partitions, std::vector<uint32_t> free_shape, DType dt) {
    return tiles_->alloc_sbuf(partitions, std::move(free_shape), dt, prog_.name);
}
Tile KernelBuilder::alloc_psum(uint32_t partitions, uint32_t free, DType dt) {
    return tiles_->alloc_psum(partitions, free, dt, prog_.name);
}
Tile KernelBuilder::alloc_psum_banks(uint32_t partitions, uint32_t banks) {
    return tiles_->alloc_psum_banks(partitions, banks, prog_.name);
}
void KernelBuilder::release(const Tile& t) { tiles_->release(t); }
uint64_t KernelBuilder::sbuf_bytes_in_use() const { return tiles_->sbuf_in_use(); }
uint64_t KernelBuilder::sbuf_peak() const { return tiles_->sbuf_peak(); }

void KernelBuilder::set_core(uint32_t core) {
    if (core >= chip_.lnc)
        throw IsaError("kernel '" + prog_.name + "': physical core " + std::to_string(core) + " of a logical core of " +
                       std::to_string(chip_.lnc) + " (the chip's lnc)");
    core_ = core;
}
void KernelBuilder::set_args_may_alias(bool may_alias) { deps_->set_args_may_alias(may_alias); }


uint32_t KernelBuilder::tag(const std::string& name) {
    for (size_t i = 0; i < prog_.tag_names.size(); ++i)
        if (prog_.tag_names[i] == name) return tag_ = static_cast<uint32_t>(i);
    prog_.tag_names.push_back(name);
    return tag_ = static_cast<uint32_t>(prog_.tag_names.size() - 1);
}

uint32_t KernelBuilder::emit(Instruction ins) {
    ins.tag = ins.tag ? ins.tag : tag_;
    ins.core = static_cast<uint8_t>(core_);
    if (core_ + 1 > prog_.cores) prog_.cores = static_cast<uint8_t>(core_ + 1);
    deps_->add_dependencies(ins, prog_);
    validate(ins, chip_, hbm_bytes_);
    deps_->commit(ins);
    prog_.instrs.push_back(ins);
    return static_cast<uint32_t>(prog_.instrs.size() - 1);
}

void KernelBuilder::barrier() { deps_->barrier(); }

Program KernelBuilder::finish() {
    static std::atomic<uint64_t> next_id{1};
    Program p = std::move(prog_);
    p.prevalidated = true;
    p.id = next_id++;
    compute_arg_extents(p);
    prog_ = Program{};
    prog_.name = p.name;
    prog_.tag_names.push_back(p.name);
    tag_ = 0;
    core_ = 0;
    deps_->reset();
    return p;
}

// ------------------------------------------------------------------ emitters
static Instruction make(Opcode op, Engine e) {
    Instruction ins;
    ins.op = op;
    ins.engine = e;
    return ins;
}

void KernelBuilder::dma_copy(const AccessPattern& dst, const AccessPattern& src, int queue) {
    emit_dma(Opcode::dma_copy, dst, src, queue);
}

void KernelBuilder::dma_transpose(const AccessPattern& dst, const AccessPattern& src, int queue) {
    emit_dma(Opcode::dma_transpose, dst, src, queue);
}

void KernelBuilder::emit_dma(Opcode op, const AccessPattern& dst, const AccessPattern& src, int queue) {
    Instruction ins = make(op, Engine::DMA);
    if (queue < 0) {
        queue = static_cast<int>(next_dma_queue_);
        next_dma_queue_ = (next_dma_queue_ + 1) % chip_.dma.queues;
    }
    ins.dma_queue = static_cast<uint8_t>(queue);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

bool KernelBuilder::has_dma_transpose() const {
    return chip_.dma.transpose_efficiency_hbm > 0 && chip_.dma.transpose_efficiency_sbuf > 0;
}

void KernelBuilder::matmul(const AccessPattern& psum_dst, const AccessPattern& stationary,
                           const AccessPattern& moving, bool accumulate) {
    Instruction ins = make(Opcode::nc_matmul, Engine::Tensor);
    ins.dst = psum_dst;
    ins.src0 = stationary;
    ins.src1 = moving;
    if (accumulate) ins.flags |= F_ACCUMULATE;
    emit(ins);
}

void KernelBuilder::transpose(const AccessPattern& dst, const AccessPattern& src, Engine e) {
    Instruction ins = make(Opcode::nc_transpose, e);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::activation(const AccessPattern& dst, const AccessPattern& src, ActFunc f, float scale,
                               float bias) {
    activation_ex(dst, src, f, scale, nullptr, bias, nullptr);
}

void KernelBuilder::activation_ex(const AccessPattern& dst, const AccessPattern& src, ActFunc f, float scale,
                                  const AccessPattern* scale_ap, float bias, const AccessPattern* bias_ap,
                                  ReduceOp reduce, const AccessPattern* acc) {
    Instruction ins = make(Opcode::activation, Engine::Scalar);
    ins.dst = dst;
    ins.src0 = src;
    ins.func = f;
    ins.imm0 = scale;
    ins.imm1 = bias;
    if (scale_ap) {
        ins.src1 = *scale_ap;
        ins.flags |= F_SCALE_AP;
    }
    if (bias_ap) {
        ins.src2 = *bias_ap;
        ins.flags |= F_BIAS_AP;
    }
    ins.reduce = reduce;
    if (reduce != ReduceOp::none) {
        if (!acc) throw IsaError("activation: a reduce needs an acc operand");
        ins.acc = *acc;
    }
    emit(ins);
}

void KernelBuilder::tensor_tensor(const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b, AluOp op,
                                  Engine e) {
    Instruction ins = make(Opcode::tensor_tensor, e);
    ins.dst = dst;
    ins.src0 = a;
    ins.src1 = b;
    ins.alu0 = op;
    emit(ins);
}

void KernelBuilder::tensor_scalar(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0, AluOp op1,
                                  float s1, Engine e) {
    tensor_scalar_ex(dst, a, op0, s0, nullptr, op1, s1, nullptr, 0, e);
}

void KernelBuilder::tensor_scalar_ex(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0,
                                     const AccessPattern* s0_ap, AluOp op1, float s1, const AccessPattern* s1_ap,
                                     uint32_t reverse_flags, Engine e) {
    Instruction ins = make(Opcode::tensor_scalar, e);
    ins.dst = dst;
    ins.src0 = a;
    ins.alu0 = op0;
    ins.alu1 = op1;
    ins.imm0 = s0;
    ins.imm1 = s1;
    if (s0_ap) {
        ins.src1 = *s0_ap;
        ins.flags |= F_S0_AP;
    }
    if (s1_ap) {
        ins.src2 = *s1_ap;
        ins.flags |= F_S1_AP;
    }
    ins.flags |= reverse_flags & (F_REVERSE0 | F_REVERSE1);
    emit(ins);
}

void KernelBuilder::tensor_reduce(const AccessPattern& dst, const AccessPattern& src, ReduceOp op, int reduce_ndim,
                                  Engine e) {
    Instruction ins = make(Opcode::tensor_reduce, e);
    ins.dst = dst;
    ins.src0 = src;
    ins.reduce = op;
    ins.reduce_ndim = static_cast<uint8_t>(reduce_ndim);
    emit(ins);
}

void KernelBuilder::tensor_copy(const AccessPattern& dst, const AccessPattern& src, Engine e) {
    Instruction ins = make(Opcode::tensor_copy, e);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::memset(const AccessPattern& dst, float value, Engine e) {
    Instruction ins = make(Opcode::memset, e);
    ins.dst = dst;
    ins.imm0 = value;
    emit(ins);
}

void KernelBuilder::iota(const AccessPattern& dst, const Affine& a) {
    Instruction ins = make(Opcode::iota, Engine::GpSimd);
    ins.dst = dst;
    ins.affine = a;
    emit(ins);
}

void KernelBuilder::affine_select(const AccessPattern& dst, const AccessPattern& src, const Affine& a, AluOp cmp,
                                  float fill) {
    Instruction ins = make(Opcode::affine_select, Engine::GpSimd);
    ins.dst = dst;
    ins.src0 = src;
    ins.affine = a;
    ins.alu0 = cmp;
    ins.imm0 = fill;
    emit(ins);
}

void KernelBuilder::select(const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& on_true,
                           const AccessPattern& on_false, Engine e) {
    Instruction ins = make(Opcode::select, e);
    ins.dst = dst;
    ins.src0 = mask;
    ins.src1 = on_true;
    ins.src2 = on_false;
    ins.flags |= F_S1_AP;
    emit(ins);
}

void KernelBuilder::max8(const AccessPattern& dst, const AccessPattern& src) {
    Instruction ins = make(Opcode::max8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = src;
    emit(ins);
}

void KernelBuilder::find_index8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values) {
    Instruction ins = make(Opcode::nc_find_index8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = data;
    ins.src1 = values;
    emit(ins);
}

void KernelBuilder::match_replace8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values,
                                   float imm, const AccessPattern* indices) {
    Instruction ins = make(Opcode::nc_match_replace8, Engine::Vector);
    ins.dst = dst;
    ins.src0 = data;
    ins.src1 = values;
    ins.imm0 = imm;
    if (indices) {
        ins.acc = *indices;
        ins.flags |= F_ACC_OUT;
    }
    emit(ins);
}

}  // namespace trnsim
