#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "trnsim/runtime.h"

using trnsim::HbmAllocator;
using trnsim::OutOfMemory;

TEST(HbmAllocator, RoundsToAlignmentAndCountsExactly) {
    HbmAllocator a(1 << 20, 512);
    uint64_t x = a.allocate(1);
    uint64_t y = a.allocate(513);
    EXPECT_EQ(x, 0u);
    EXPECT_EQ(y, 512u);
    EXPECT_EQ(a.in_use(), 512u + 1024u);
    EXPECT_EQ(a.live_allocations(), 2u);
    a.release(x);
    EXPECT_EQ(a.in_use(), 1024u);
    EXPECT_EQ(a.peak(), 1536u);
    a.reset_peak();
    EXPECT_EQ(a.peak(), 1024u);
}

TEST(HbmAllocator, FirstFitReusesLowestHole) {
    HbmAllocator a(8 * 512, 512);
    uint64_t b0 = a.allocate(512), b1 = a.allocate(512), b2 = a.allocate(512);
    (void)b0;
    a.release(b1);
    EXPECT_EQ(a.allocate(512), b1);
    a.release(b2);
    a.release(b1);
    // b1 and b2 coalesce with the tail into one block starting at b1.
    EXPECT_EQ(a.largest_free_block(), 7u * 512);
    EXPECT_EQ(a.allocate(7 * 512), b1);
}

TEST(HbmAllocator, OutOfMemoryLeavesStateIntact) {
    HbmAllocator a(4 * 512, 512);
    uint64_t x = a.allocate(3 * 512);
    EXPECT_THROW(a.allocate(2 * 512), OutOfMemory);
    EXPECT_EQ(a.in_use(), 3u * 512);
    EXPECT_EQ(a.allocate(512), x + 3 * 512);
    EXPECT_THROW(a.allocate(1), OutOfMemory);
}

TEST(HbmAllocator, ReleaseOfUnknownAddressThrows) {
    HbmAllocator a(4096, 512);
    uint64_t x = a.allocate(100);
    EXPECT_THROW(a.release(x + 512), std::invalid_argument);
    a.release(x);
    EXPECT_THROW(a.release(x), std::invalid_argument);
}

TEST(HbmAllocator, RejectsNonPowerOfTwoAlignment) {
    EXPECT_THROW(HbmAllocator(4096, 384), std::invalid_argument);
}

TEST(HbmAllocator, RandomChurnCoalescesBackToOneBlock) {
    const uint64_t cap = 1 << 22;
    HbmAllocator a(cap, 512);
    std::mt19937 rng(7);
    std::vector<uint64_t> live;
    for (int step = 0; step < 2000; ++step) {
        if (!live.empty() && (rng() % 2 == 0 || live.size() > 100)) {
            size_t i = rng() % live.size();
            a.release(live[i]);
            live.erase(live.begin() + static_cast<long>(i));
        } else {
            try {
                live.push_back(a.allocate(1 + rng() % 65536));
            } catch (const OutOfMemory&) {
            }
        }
        ASSERT_LE(a.in_use(), cap);
        ASSERT_EQ(a.live_allocations(), live.size());
    }
    for (uint64_t addr : live) a.release(addr);
    EXPECT_EQ(a.in_use(), 0u);
    EXPECT_EQ(a.largest_free_block(), cap);
}
