// ProgramCache: built Programs by signature, least recently used evicted first (runtime.h).
#include <utility>

#include "trnsim/runtime.h"

namespace trnsim {

ProgramCache::ProgramCache(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

std::shared_ptr<const Program> ProgramCache::find(std::string_view key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) {
        ++misses_;
        return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);   // most recently used first
    return it->second->program;
}

std::shared_ptr<const Program> ProgramCache::insert(std::string key, Program program) {
    auto shared = std::make_shared<const Program>(std::move(program));
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = index_.find(std::string_view(key)); it != index_.end()) {
        // Another thread built the same signature first: keep one Program per signature.
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->program;
    }
    lru_.push_front(Entry{std::move(key), shared});
    index_.emplace(std::string_view(lru_.front().key), lru_.begin());
    instructions_ += shared->instrs.size();
    evict_to(capacity_);
    return shared;
}

void ProgramCache::evict_to(size_t entries) {
    while (lru_.size() > entries) {
        const Entry& victim = lru_.back();
        instructions_ -= victim.program->instrs.size();
        index_.erase(std::string_view(victim.key));
        lru_.pop_back();
        ++evictions_;
    }
}

void ProgramCache::set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity == 0 ? 1 : capacity;
    evict_to(capacity_);
}

void ProgramCache::clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    index_.clear();
    lru_.clear();
    instructions_ = 0;
}

ProgramCache::Stats ProgramCache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return Stats{lru_.size(), capacity_, instructions_, hits_, misses_, evictions_};
}

ProgramCache& shared_program_cache() {
    static auto* cache = new ProgramCache();   // leaked: programs may still run during static destruction
    return *cache;
}

}  // namespace trnsim
