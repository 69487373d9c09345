// schedule: a topological order that keeps compiled nodes together (eager nodes keep their
// order among themselves). Ready nodes the compiler
// lowers go first; nodes run eagerly by the host are deferred until nothing else is ready, so
// they split the graph into as few program segments as possible. Dead nodes are dropped.
#include <set>

#include "passes.h"

namespace trnsim::compiler {

void schedule(Graph& g, PassContext& ctx) {
    const std::vector<int> live = g.live_nodes();
    const auto users = g.users();
    // Eager nodes also depend on the eager node before them: host-side values flow between them.
    std::vector<int> pending(g.nodes.size(), 0), next_eager(g.nodes.size(), -1);
    int previous_eager = -1;
    for (int i : live) {
        if (g.nodes[i].op != Op::eager) continue;
        if (previous_eager >= 0) {
            next_eager[previous_eager] = i;
            ++pending[i];
        }
        previous_eager = i;
    }
    for (int i : live) {
        std::vector<int> seen;
        for (int in : g.nodes[i].inputs) {
            const int p = g.values[in].producer;
            if (p >= 0 && std::find(seen.begin(), seen.end(), p) == seen.end()) {
                seen.push_back(p);
                ++pending[i];
            }
        }
    }
    std::set<int> ready_compiled, ready_eager;
    auto make_ready = [&](int i) { (g.nodes[i].op == Op::eager ? ready_eager : ready_compiled).insert(i); };
    for (int i : live)
        if (pending[i] == 0) make_ready(i);
    std::vector<int> order;
    auto retire = [&](int i) {
        order.push_back(i);
        std::vector<int> done;
        for (int out : g.nodes[i].outputs)
            for (int u : users[out])
                if (std::find(done.begin(), done.end(), u) == done.end()) {
                    done.push_back(u);
                    if (--pending[u] == 0) make_ready(u);
                }
        if (next_eager[i] >= 0 && --pending[next_eager[i]] == 0) make_ready(next_eager[i]);
    };
    while (!ready_compiled.empty() || !ready_eager.empty()) {
        if (!ready_compiled.empty()) {
            const int i = *ready_compiled.begin();
            ready_compiled.erase(ready_compiled.begin());
            retire(i);
        } else {
            const std::vector<int> batch(ready_eager.begin(), ready_eager.end());
            ready_eager.clear();
            for (int i : batch) retire(i);
        }
    }
    if (order.size() != live.size()) throw CompileError("schedule: the graph has a cycle");

    std::vector<Node> nodes;
    nodes.reserve(order.size());
    for (int i : order) nodes.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(nodes);
    for (size_t i = 0; i < g.nodes.size(); ++i)
        for (int out : g.nodes[i].outputs) g.values[out].producer = static_cast<int>(i);
    int64_t segments = 0;
    bool in_program = false;
    for (const Node& n : g.nodes) {
        const bool lowered = n.op != Op::eager && n.op != Op::view;
        if (lowered && !in_program) ++segments;
        if (n.op == Op::eager) in_program = false;
        else if (lowered) in_program = true;
    }
    ctx.stats["scheduled_nodes"] = static_cast<int64_t>(g.nodes.size());
    ctx.stats["program_segments"] = segments;
}

}  // namespace trnsim::compiler
