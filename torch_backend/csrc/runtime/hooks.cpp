// Backend registration: the "neuron" name, PrivateUse1 hooks (generators,
// pinned host memory, pointer -> device, storage resize) and the pinned host
// allocator.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceType.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "runtime/allocator.h"
#include "runtime/devices.h"
#include "runtime/generator.h"

namespace trnsim::neuron {
namespace {

// Page-locked memory has no meaning for a simulator; "pinned" host buffers
// are ordinary page-aligned host memory that the backend can recognise.
class PinnedHostAllocator final : public at::HostAllocator {
public:
    at::DataPtr allocate(size_t nbytes) override {
        if (nbytes == 0) return at::DataPtr(nullptr, at::Device(at::kCPU));
        void* ptr = nullptr;
        TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&ptr, kPageBytes, nbytes) == 0,
                         "trnsim: cannot allocate ", nbytes, " bytes of pinned host memory");
        std::lock_guard<std::mutex> lock(mutex_);
        live_.emplace(ptr, nbytes);
        stats_.active_requests.increase(1);
        stats_.allocations.increase(1);
        stats_.active_bytes.increase(nbytes);
        stats_.allocated_bytes.increase(nbytes);
        stats_.num_host_alloc += 1;
        return at::DataPtr(ptr, ptr, &release, at::Device(at::kCPU));
    }
    at::DeleterFnPtr raw_deleter() const override { return &release; }
    void copy_data(void* dest, const void* src, size_t count) const override {
        std::memcpy(dest, src, count);
    }

    bool record_event(void*, void*, c10::Stream) override { return true; }
    void empty_cache() override {}
    at::HostStats get_stats() override {
        std::lock_guard<std::mutex> lock(mutex_);
        return stats_;
    }
    void reset_accumulated_stats() override {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto* s : {&stats_.active_requests, &stats_.allocations, &stats_.active_bytes,
                        &stats_.allocated_bytes})
            s->reset_accumulated();
        stats_.num_host_alloc = 0;
        stats_.num_host_free = 0;
    }
    void reset_peak_stats() override {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto* s : {&stats_.active_requests, &stats_.allocations, &stats_.active_bytes,
                        &stats_.allocated_bytes})
            s->reset_peak();
    }

    bool is_pinned(const void* ptr) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (live_.count(const_cast<void*>(ptr))) return true;
        // Interior pointers (views) count too.
        auto p = static_cast<const char*>(ptr);
        for (const auto& [base, size] : live_)
            if (p >= static_cast<char*>(base) && p < static_cast<char*>(base) + size) return true;
        return false;
    }

    static PinnedHostAllocator& instance() {
        static auto* a = new PinnedHostAllocator();
        return *a;
    }

private:
    static constexpr size_t kPageBytes = 4096;

    static void release(void* ptr) {
        PinnedHostAllocator& a = instance();
        {
            std::lock_guard<std::mutex> lock(a.mutex_);
            auto it = a.live_.find(ptr);
            TORCH_INTERNAL_ASSERT(it != a.live_.end(), "trnsim: freeing unknown pinned memory");
            a.stats_.active_requests.decrease(1);
            a.stats_.allocations.decrease(1);
            a.stats_.active_bytes.decrease(it->second);
            a.stats_.allocated_bytes.decrease(it->second);
            a.stats_.num_host_free += 1;
            a.live_.erase(it);
        }
        std::free(ptr);
    }

    std::mutex mutex_;
    std::unordered_map<void*, size_t> live_;
    at::HostStats stats_;
};

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
    void init() const override { (void)chip(); }
    bool isBuilt() const override { return true; }
    bool isAvailable() const override { return device_count() > 0; }
    bool hasPrimaryContext(c10::DeviceIndex index) const override { return is_created(index); }

    c10::DeviceIndex deviceCount() const override { return device_count(); }
    void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
    c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
        c10::DeviceIndex old = current_device();
        if (index >= 0 && index != old) set_current_device(index);
        return old;
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
        return exchangeDevice(index);
    }

    const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
        return default_generator(index);
    }
    at::Generator getNewGenerator(c10::DeviceIndex index) const override {
        if (index < 0) index = current_device();
        check_index(index);
        return at::make_generator<NeuronGenerator>(index);
    }

    at::Device getDeviceFromPtr(void* data) const override {
        c10::DeviceIndex index = device_of_host_ptr(data);
        TORCH_CHECK(index >= 0, "trnsim: pointer ", data, " is not in any neuron device's memory");
        return at::Device(at::kPrivateUse1, index);
    }

    bool isPinnedPtr(const void* data) const override {
        return PinnedHostAllocator::instance().is_pinned(data);
    }
    at::Allocator* getPinnedMemoryAllocator() const override {
        return &PinnedHostAllocator::instance();
    }

    // Storage.resize_(): new block, old contents kept up to the smaller size.
    void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
        c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
        TORCH_CHECK(impl->resizable(), "trnsim: trying to resize a storage that is not resizable");
        c10::DeviceIndex index = impl->device().index();
        c10::DeviceIndex previous = exchangeDevice(index);
        at::DataPtr fresh = impl->allocator()->allocate(new_bytes);
        exchangeDevice(previous);
        size_t keep = std::min(new_bytes, impl->nbytes());
        if (keep > 0 && !timing_only()) std::memcpy(fresh.get(), impl->data(), keep);   // no values in timing-only mode
        impl->set_data_ptr_noswap(std::move(fresh));
        impl->set_nbytes(new_bytes);
    }
};

const bool registered = [] {
    c10::register_privateuse1_backend("neuron");
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
    return true;
}();

}  // namespace

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &PinnedHostAllocator::instance())

}  // namespace trnsim::neuron
