// Point measurements: single DMA transfers and dependent ScalarE instructions.
#include "common.h"
#include "kernels.h"

namespace trnsim::fidelity {

std::vector<Program> dma_single_engine(const ChipConfig& chip, uint32_t partitions, uint32_t bytes_per_partition) {
    KernelBuilder kb(chip, "dma_single_engine");
    HbmArena hbm;
    const uint32_t cols = bytes_per_partition / 2;
    HbmTensor a = HbmTensor::make(hbm, DType::bf16, partitions, cols);
    Tile t = kb.alloc_sbuf(partitions, {cols}, DType::bf16);
    kb.dma_copy(t.ap(), a.tile(0, partitions, 0, cols), 0);
    return {kb.finish()};
}

std::vector<Program> dma_spread_load(const ChipConfig& chip, uint32_t cols) {
    KernelBuilder kb(chip, "dma_spread_load");
    HbmArena hbm;
    HbmTensor a = HbmTensor::make(hbm, DType::bf16, 128, cols);
    Tile t = kb.alloc_sbuf(128, {cols}, DType::bf16);
    load(kb, t.ap(), a.tile(0, 128, 0, cols));
    return {kb.finish()};
}

std::vector<Program> dma_loaded(const ChipConfig& chip, uint32_t bytes, int rounds) {
    KernelBuilder kb(chip, "dma_loaded");
    HbmArena hbm;
    const uint32_t queues = chip.dma.queues, rows = 8, cols = bytes / rows / 4;
    HbmTensor in = HbmTensor::make(hbm, DType::f32, uint64_t(queues) * rows * rounds, cols);
    HbmTensor out = HbmTensor::make(hbm, DType::f32, uint64_t(queues) * rows * rounds, cols);
    Tile t = kb.alloc_sbuf(queues * rows, {2, cols}, DType::f32);
    for (int r = 0; r < rounds; ++r)
        for (uint32_t q = 0; q < queues; ++q) {
            AccessPattern slot = sub(entry(t, r % 2), q * rows, rows);
            const uint64_t row = (uint64_t(r) * queues + q) * rows;
            kb.dma_copy(slot, in.tile(row, rows, 0, cols), static_cast<int>(q));
            kb.dma_copy(out.tile(row, rows, 0, cols), slot, static_cast<int>(q));
        }
    return {kb.finish()};
}

std::vector<Program> scalar_dependent_chain(const ChipConfig& chip, int length) {
    KernelBuilder kb(chip, "scalar_dependent_chain");
    Tile x = kb.alloc_sbuf(128, {1}, DType::f32), y = kb.alloc_sbuf(128, {1}, DType::f32);
    for (int i = 0; i < length; ++i) {
        const Tile& src = i % 2 ? y : x;
        const Tile& dst = i % 2 ? x : y;
        kb.activation(dst.ap(), src.ap(), ActFunc::identity, 2.0f, 1.0f);
    }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
