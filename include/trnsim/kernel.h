// KernelBuilder: writes Programs the way a kernel author (or the compiler)
// thinks: allocate tiles in SBUF/PSUM, issue DMAs and engine instructions, and
// let the builder insert the semaphores that order them.
//
// Dependencies: every emitted instruction's footprint (memory space, partition
// range, byte range of each operand) is compared with earlier accesses; a
// read-after-write, write-after-read or write-after-write on another queue
// becomes a SemWait on that queue's completion semaphore (src/kernel/
// dependency_tracker.h). Same-queue order is implicit (queues are in order).
// This is the job semaphores do in real compiled NEFFs, so tiling and double
// buffering give overlap automatically.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

namespace trnsim {

class DependencyTracker;
class TileAllocator;

// A region of SBUF or PSUM: [partitions, free...] of one dtype, contiguous free dims.
struct Tile {
    MemSpace space = MemSpace::SBUF;
    DType dtype = DType::f32;
    uint16_t start_partition = 0;
    uint16_t partitions = 0;
    uint64_t offset = 0;                 // byte offset within each partition
    std::vector<uint32_t> shape;         // free dims
    uint64_t bytes_per_partition() const;

    AccessPattern ap() const;                                   // the whole tile
    AccessPattern rows(uint32_t p0, uint32_t n) const;         // partition slice
    // Slice of the innermost free dim (whole tile for the other dims).
    AccessPattern cols(uint32_t begin, uint32_t count) const;
    // Partition slice + innermost-dim slice.
    AccessPattern region(uint32_t p0, uint32_t np, uint32_t c0, uint32_t nc) const;
};

class KernelBuilder {
public:
    KernelBuilder(const ChipConfig& chip, std::string name, uint64_t hbm_bytes = 0);
    ~KernelBuilder();
    KernelBuilder(KernelBuilder&&) noexcept;
    KernelBuilder& operator=(KernelBuilder&&) noexcept;

    const ChipConfig& chip() const { return chip_; }

    // ---- physical cores (SPMD over a logical core of chip().lnc physical cores)
    // Instructions emitted from now on run on physical core 'core' (0 <= core < chip().lnc).
    // Each core has its own queues, SBUF and PSUM and shares HBM with the others. Tiles are
    // allocated at the same addresses on every core, as in an SPMD program: a tile names that
    // region of the SBUF / PSUM of whichever core the instruction using it runs on. Dependencies
    // across cores (through HBM) become remote semaphore waits.
    void set_core(uint32_t core);
    uint32_t core() const { return core_; }
    uint32_t num_cores() const { return chip_.lnc; }

    // ---- on-chip memory (first fit, the same region on every physical core; throws IsaError
    //      when SBUF/PSUM is full)
    Tile alloc_sbuf(uint32_t partitions, std::vector<uint32_t> free_shape, DType dt);
    Tile alloc_psum(uint32_t partitions, uint32_t free, DType dt = DType::f32);  // within one bank
    // 'banks' whole consecutive banks of fp32 ([partitions, banks x 512]): matmuls write one bank
    // each, Vector/Scalar instructions may read across them.
    Tile alloc_psum_banks(uint32_t partitions, uint32_t banks);
    void release(const Tile& t);
    uint64_t sbuf_bytes_in_use() const;   // per partition, high-water mark in sbuf_peak()
    uint64_t sbuf_peak() const;

    // ---- instructions (validated immediately; dependencies inserted)
    // queue < 0 picks the DMA queue round robin.
    void dma_copy(const AccessPattern& dst, const AccessPattern& src, int queue = -1);
    // dst[F, P] = src[P, F] during the DMA (chips with dma.transpose_efficiency_*; see
    // has_dma_transpose()).
    void dma_transpose(const AccessPattern& dst, const AccessPattern& src, int queue = -1);
    bool has_dma_transpose() const;
    void matmul(const AccessPattern& psum_dst, const AccessPattern& stationary,
                const AccessPattern& moving, bool accumulate);
    void transpose(const AccessPattern& dst, const AccessPattern& src, Engine e = Engine::Tensor);
    void activation(const AccessPattern& dst, const AccessPattern& src, ActFunc f,
                    float scale = 1.0f, float bias = 0.0f);
    // Full form: per-partition scale/bias vectors (nullptr = use the immediates) and a reduce.
    void activation_ex(const AccessPattern& dst, const AccessPattern& src, ActFunc f,
                       float scale, const AccessPattern* scale_ap, float bias,
                       const AccessPattern* bias_ap, ReduceOp reduce = ReduceOp::none,
                       const AccessPattern* acc = nullptr);
    void tensor_tensor(const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b,
                       AluOp op, Engine e = Engine::Vector);
    void tensor_scalar(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0,
                       AluOp op1 = AluOp::bypass, float s1 = 0.0f, Engine e = Engine::Vector);
    // s0/s1 as per-partition vectors [P,1]; nullptr = use the immediate.
    void tensor_scalar_ex(const AccessPattern& dst, const AccessPattern& a, AluOp op0, float s0,
                          const AccessPattern* s0_ap, AluOp op1, float s1,
                          const AccessPattern* s1_ap, uint32_t reverse_flags = 0,
                          Engine e = Engine::Vector);
    void tensor_reduce(const AccessPattern& dst, const AccessPattern& src, ReduceOp op,
                       int reduce_ndim = 1, Engine e = Engine::Vector);
    void tensor_copy(const AccessPattern& dst, const AccessPattern& src, Engine e = Engine::Vector);
    void memset(const AccessPattern& dst, float value, Engine e = Engine::Vector);
    void iota(const AccessPattern& dst, const Affine& a);
    void affine_select(const AccessPattern& dst, const AccessPattern& src, const Affine& a,
                       AluOp cmp, float fill);
    void select(const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& on_true,
                const AccessPattern& on_false, Engine e = Engine::Vector);
    // Top-k building blocks (VectorE): the 8 largest values of each partition of src (descending),
    // the index of the first occurrence of each of 8 values, and the replacement of those first
    // occurrences by 'imm' (with their indices into *indices when given).
    void max8(const AccessPattern& dst, const AccessPattern& src);
    void find_index8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values);
    void match_replace8(const AccessPattern& dst, const AccessPattern& data, const AccessPattern& values, float imm,
                        const AccessPattern* indices = nullptr);
    // Every queue waits until everything emitted so far has completed.
    void barrier();

    // Generic entry: fills in dependencies, validates, appends. Returns its index.
    uint32_t emit(Instruction ins);

    // Launch arguments (AccessPattern::arg): by default two different arguments are
    // assumed not to overlap (the caller guarantees it, e.g. an op's output is not one of
    // its inputs). Allow aliasing for in-place kernels: dependencies then treat any two
    // argument footprints as overlapping.
    void set_args_may_alias(bool may_alias);

    // Label subsequent instructions (the profiler shows tag names).
    uint32_t tag(const std::string& name);
    void set_tag(uint32_t tag) { tag_ = tag; }

    Program finish();   // the builder is empty afterwards
    size_t size() const { return prog_.instrs.size(); }

private:
    void emit_dma(Opcode op, const AccessPattern& dst, const AccessPattern& src, int queue);

    ChipConfig chip_;
    uint64_t hbm_bytes_;
    Program prog_;
    uint32_t tag_ = 0;
    uint32_t core_ = 0;
    uint32_t next_dma_queue_ = 0;
    std::unique_ptr<DependencyTracker> deps_;   // src/kernel/dependency_tracker.h
    std::unique_ptr<TileAllocator> tiles_;      // src/kernel/tile_allocator.h
};

}  // namespace trnsim
