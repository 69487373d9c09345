// plan_memory: where every tensor lives. Graph inputs keep their own slots; buffers that are
// graph outputs, or that eager nodes write, get slots of their own (the host allocates them);
// every other HBM intermediate gets an offset in one workspace, reusing the bytes of buffers
// whose last reader has run (first fit by lifetime). Fused intermediates never reach HBM:
// their SBUF tiles are assigned here as well (assign_scratch_tiles).
#include <algorithm>

#include "passes.h"

namespace trnsim::compiler {

namespace {

constexpr int64_t kAlignment = 512;

int64_t align_up(int64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

struct Interval {
    int64_t begin, end;   // node positions: written at begin, last read at end
    int64_t offset, bytes;
};

}  // namespace

Placement MemoryPlan::place(const Graph& g, int value) const {
    const Value& v = g.values[value];
    Placement p;
    p.slot = storage_slot[v.storage];
    p.byte_offset = storage_offset[v.storage] + v.offset * static_cast<int64_t>(dtype_size(v.dtype));
    p.dtype = v.dtype;
    p.sizes = v.sizes;
    p.strides = v.strides;
    return p;
}

MemoryPlan plan_memory(const Graph& g, PassContext& ctx) {
    MemoryPlan plan;
    const size_t ns = g.storages.size();
    plan.storage_slot.assign(ns, -1);
    plan.storage_offset.assign(ns, 0);
    for (size_t i = 0; i < g.inputs.size(); ++i) {
        const int st = g.values[g.inputs[i]].storage;
        plan.slots.push_back({SlotKind::input, g.storages[st].bytes, static_cast<int>(i)});
        plan.storage_slot[st] = static_cast<int>(i);
    }

    std::vector<int64_t> first(ns, -1), last(ns, -1);
    std::vector<int> writer(ns, -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        if (n.dead) continue;
        for (int in : n.inputs) last[g.values[in].storage] = static_cast<int64_t>(i);
        if (n.op == Op::view) continue;
        for (int out : n.outputs) {
            const int st = g.values[out].storage;
            if (first[st] < 0) first[st] = static_cast<int64_t>(i);
            last[st] = std::max<int64_t>(last[st], static_cast<int64_t>(i));
            writer[st] = static_cast<int>(i);
        }
    }
    std::vector<bool> is_output(ns, false);
    for (int v : g.outputs) is_output[g.values[v].storage] = true;

    std::vector<int> workspace_storages;
    for (size_t st = 0; st < ns; ++st) {
        if (g.storages[st].input >= 0 || first[st] < 0) continue;
        if (g.nodes[writer[st]].op == Op::eager) {
            plan.storage_slot[st] = static_cast<int>(plan.slots.size());
            plan.slots.push_back({SlotKind::eager, g.storages[st].bytes, writer[st]});
        } else if (is_output[st]) {
            plan.storage_slot[st] = static_cast<int>(plan.slots.size());
            plan.slots.push_back({SlotKind::output, g.storages[st].bytes, -1});
        } else {
            workspace_storages.push_back(static_cast<int>(st));
        }
    }

    // Workspace: first fit among intervals that overlap in time.
    std::sort(workspace_storages.begin(), workspace_storages.end(),
              [&](int a, int b) { return first[a] != first[b] ? first[a] < first[b] : a < b; });
    std::vector<Interval> placed;
    for (int st : workspace_storages) {
        const int64_t bytes = align_up(std::max<int64_t>(g.storages[st].bytes, 1));
        std::vector<std::pair<int64_t, int64_t>> busy;   // byte ranges live during [first, last]
        for (const Interval& iv : placed)
            if (iv.end >= first[st] && iv.begin <= last[st]) busy.push_back({iv.offset, iv.offset + iv.bytes});
        std::sort(busy.begin(), busy.end());
        int64_t offset = 0;
        for (const auto& [b0, b1] : busy) {
            if (offset + bytes <= b0) break;
            offset = std::max(offset, b1);
        }
        placed.push_back({first[st], std::max(last[st], first[st]), offset, bytes});
        plan.storage_offset[st] = offset;
        plan.workspace_bytes = std::max(plan.workspace_bytes, offset + bytes);
    }
    if (!workspace_storages.empty()) {
        plan.workspace_slot = static_cast<int>(plan.slots.size());
        plan.slots.push_back({SlotKind::workspace, plan.workspace_bytes, -1});
        for (int st : workspace_storages) plan.storage_slot[st] = plan.workspace_slot;
    }

    int64_t scratch_tiles = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (g.nodes[i].dead || g.nodes[i].op != Op::fused_elementwise) continue;
        int tiles = 0;
        assign_scratch_tiles(g.nodes[i], &tiles);
        plan.fused_scratch_tiles[static_cast<int>(i)] = tiles;
        scratch_tiles += tiles;
    }
    int64_t intermediate_bytes = 0;
    for (int st : workspace_storages) intermediate_bytes += g.storages[st].bytes;
    ctx.stats["hbm_intermediate_bytes"] = intermediate_bytes;
    ctx.stats["sbuf_scratch_tiles"] = scratch_tiles;
    return plan;
}

}  // namespace trnsim::compiler
