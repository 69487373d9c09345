#include "runtime/generator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "runtime/devices.h"

namespace trnsim::neuron {

constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

NeuronGenerator::NeuronGenerator(c10::DeviceIndex device_index)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device_index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::default_rng_seed_val) {}

void NeuronGenerator::set_current_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
}

uint64_t NeuronGenerator::seed() {
    uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
}

void NeuronGenerator::set_state(const c10::TensorImpl& new_state) {
    TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.numel() == static_cast<int64_t>(kStateBytes) &&
                    new_state.is_contiguous() && new_state.device().is_cpu(),
                "trnsim: a neuron RNG state is a contiguous CPU ByteTensor of ", kStateBytes,
                " bytes (seed, offset); got ", new_state.numel(), " elements of ",
                new_state.dtype().name());
    uint64_t words[2];
    std::memcpy(words, new_state.data(), kStateBytes);
    seed_ = words[0];
    offset_ = words[1];
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
    at::Tensor state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, c10::ScalarType::Byte,
                                             std::nullopt, std::nullopt, std::nullopt, std::nullopt);
    uint64_t words[2] = {seed_, offset_};
    std::memcpy(state.data_ptr(), words, kStateBytes);
    return state.getIntrusivePtr();
}

uint64_t NeuronGenerator::reserve_blocks(uint64_t blocks) {
    uint64_t first = offset_;
    offset_ += blocks;
    return first;
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
    auto* g = new NeuronGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
    if (index < 0) index = current_device();
    check_index(index);
    static auto* mutex = new std::mutex();                       // leaked, as the generators
    static auto* generators = new std::deque<at::Generator>();   // stable addresses, never freed
    std::lock_guard<std::mutex> lock(*mutex);
    while (generators->size() <= static_cast<size_t>(index)) {
        auto i = static_cast<c10::DeviceIndex>(generators->size());
        generators->push_back(at::make_generator<NeuronGenerator>(i));
    }
    return (*generators)[index];
}

}  // namespace trnsim::neuron
