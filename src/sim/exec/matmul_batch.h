// Batched execution of matmul chains (private to src/sim): the run loop hands consecutive
// nc_matmul chains that share their moving operands to one BLAS product, and keeps fp32 copies
// of operands it may reuse.
#pragma once
#include <cstddef>
#include <vector>

#include "trnsim/sim.h"

namespace trnsim {

// fp32 copy of the moving operands of the last matmul chain, valid while nothing
// writes SBUF bytes [b0, b1) of partitions [p0, p1) (the run loop invalidates it).
struct MovingOperandCache {
    bool valid = false;
    std::vector<AccessPattern> operands;
    uint32_t p0 = 0, p1 = 0;
    uint64_t b0 = 0, b1 = 0;   // conservative byte bound within a partition
    std::vector<float> data;
    // The same for the stacked stationaries of recent matmul batches (an A panel swept
    // once per moving chunk), one entry per batch, each with its own bounds.
    std::vector<MovingOperandCache> stationaries;
};

// Consecutive nc_matmuls into the same PSUM tile, all but the first accumulating:
// executed as one product (same result up to fp32 association order).
void execute_matmul_chain(CoreMemory& mem, const Instruction* chain, size_t count,
                          MovingOperandCache* cache = nullptr);
// Several such chains with identical moving operands, into distinct PSUM tiles, executed
// as one product (the run loop checks that nothing between them touches their operands).
struct MatmulChainRef {
    const Instruction* first;
    size_t count;
};
void execute_matmul_batch(CoreMemory& mem, const MatmulChainRef* chains, size_t count, MovingOperandCache* cache);

}  // namespace trnsim
