// Per-device random generator: counter-based Philox-4x32-10.
//
// State = (seed, offset). A random op reserves a block of Philox counters
// (offset advances by the number of 128-bit blocks used), so the values depend
// only on the seed and the sequence of ops: same seed, same values. The state
// as torch sees it (get_state/set_state) is 16 bytes: seed then offset, both
// little-endian uint64, the layout DTensor's OffsetBasedRNGTracker expects.
#pragma once
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace trnsim::neuron {

class NeuronGenerator final : public c10::GeneratorImpl {
public:
    explicit NeuronGenerator(c10::DeviceIndex device_index);

    void set_current_seed(uint64_t seed) override;
    uint64_t current_seed() const override { return seed_; }
    uint64_t seed() override;
    void set_offset(uint64_t offset) override { offset_ = offset; }
    uint64_t get_offset() const override { return offset_; }
    void set_state(const c10::TensorImpl& new_state) override;
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

    // Reserves 'blocks' Philox counter blocks (4 x uint32 each); returns the
    // first. The caller holds mutex_.
    uint64_t reserve_blocks(uint64_t blocks);

    static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

private:
    NeuronGenerator* clone_impl() const override;

    uint64_t seed_;
    uint64_t offset_ = 0;
};

// Default generator of neuron:index (created on first use).
const at::Generator& default_generator(c10::DeviceIndex index);

}  // namespace trnsim::neuron
