// Caching allocator of neuron device memory.
//
// Blocks come from each device's HbmAllocator (simulated HBM addresses) and
// are handed to PyTorch as host pointers into the device's HBM mapping. Freed
// blocks are kept per exact size for reuse until empty_cache() or until an
// allocation would otherwise fail. Statistics follow the CUDA caching
// allocator's definitions: allocated = live blocks, reserved = live + cached.
#pragma once
#include <c10/core/CachingDeviceAllocator.h>

namespace trnsim::neuron {

// Bytes a request of 'nbytes' occupies (HBM allocation granule).
size_t allocation_size(size_t nbytes);

// The registered PrivateUse1 allocator.
c10::DeviceAllocator* device_allocator();

}  // namespace trnsim::neuron
