// What max8, nc_find_index8 and nc_match_replace8 share: the order of the top-8 search and the
// match rule of the index searches.
#pragma once
#include <cmath>
#include <cstdint>

namespace trnsim::exec {

// Descending order of max8: NaN above every number (as torch.topk ranks it), then by value.
inline bool ranks_above(float a, float b) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
    return a > b;
}

// The index searches compare in fp32; a NaN value matches a NaN element, so the index of every
// value max8 returns is found.
inline bool matches(float element, float value) {
    return element == value || (std::isnan(element) && std::isnan(value));
}

// Index of the first element of row[0, n) matching value, or -1.
inline int64_t first_match(const float* row, uint64_t n, float value) {
    for (uint64_t i = 0; i < n; ++i)
        if (matches(row[i], value)) return static_cast<int64_t>(i);
    return -1;
}

}  // namespace trnsim::exec
