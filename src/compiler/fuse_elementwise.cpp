// fuse_elementwise: chains and trees of pointwise nodes over one output shape become one
// fused_elementwise node, evaluated tile by tile in SBUF (one load per input, one store per
// output that is read outside the group).
#include <algorithm>

#include "passes.h"

namespace trnsim::compiler {

namespace {

constexpr size_t kMaxOperands = 6;   // inputs + outputs of one fused kernel (its DMA access patterns)

bool fusible(const Node& n) {
    if (n.outputs.size() != 1) return false;
    switch (n.op) {
        case Op::copy:
        case Op::binary_scalar:
        case Op::where: return true;
        case Op::unary: return n.i0 != static_cast<int64_t>(ops::Unary::logical_not);
        case Op::binary: return n.f0 == 1.0f;
        default: return false;
    }
}

struct Group {
    std::vector<int> members;   // node indices in list order
    std::vector<int64_t> shape;
};

// External inputs and outputs of the nodes 'members' (in order).
void group_operands(const Graph& g, const std::vector<std::vector<int>>& users, const std::vector<int>& members,
                    std::vector<int>* inputs, std::vector<int>* outputs) {
    std::vector<int> produced;
    for (int m : members) {
        for (int in : g.nodes[m].inputs)
            if (std::find(produced.begin(), produced.end(), in) == produced.end() &&
                std::find(inputs->begin(), inputs->end(), in) == inputs->end())
                inputs->push_back(in);
        produced.push_back(g.nodes[m].outputs[0]);
    }
    for (int m : members) {
        const int v = g.nodes[m].outputs[0];
        bool external = g.is_graph_output(v);
        for (int u : users[v]) external = external || std::find(members.begin(), members.end(), u) == members.end();
        if (external) outputs->push_back(v);
    }
}

}  // namespace

void fuse_elementwise(Graph& g, PassContext& ctx) {
    const auto users = g.users();
    const std::vector<int> pos = node_positions(g);
    std::vector<int> group_of(g.nodes.size(), -1);
    std::vector<Group> groups;

    for (int i : g.live_nodes()) {
        const Node& n = g.nodes[i];
        if (!fusible(n)) continue;
        const std::vector<int64_t>& shape = g.values[n.outputs[0]].sizes;
        int chosen = -1;
        for (int in : n.inputs) {
            const int p = g.values[in].producer;
            if (p < 0 || group_of[p] < 0 || chosen >= 0) continue;
            Group& grp = groups[group_of[p]];
            if (grp.shape != shape) continue;
            // The fused node takes n's place: no outside reader of the group may come before it.
            bool ordered = true;
            for (int m : grp.members)
                for (int u : users[g.nodes[m].outputs[0]])
                    ordered = ordered && (u == i || group_of[u] == group_of[p] || pos[u] > pos[i]);
            if (!ordered) continue;
            std::vector<int> members = grp.members, ins, outs;
            members.push_back(i);
            group_operands(g, users, members, &ins, &outs);
            if (ins.size() + outs.size() > kMaxOperands) continue;
            chosen = group_of[p];
        }
        if (chosen < 0) {
            groups.push_back({{}, shape});
            chosen = static_cast<int>(groups.size()) - 1;
        }
        groups[chosen].members.push_back(i);
        group_of[i] = chosen;
    }

    for (const Group& grp : groups) {
        if (grp.members.size() < 2) continue;
        std::vector<int> ins, outs;
        group_operands(g, users, grp.members, &ins, &outs);
        Node fused;
        fused.op = Op::fused_elementwise;
        fused.inputs = ins;
        fused.outputs = outs;
        std::vector<int> step_of_value(g.values.size(), -1);
        for (int m : grp.members) {
            const Node& n = g.nodes[m];
            Step s;
            s.op = n.op;
            s.i0 = n.i0;
            s.i1 = n.i1;
            s.f0 = n.f0;
            s.f1 = n.f1;
            s.dtype = g.values[n.outputs[0]].dtype;
            for (int in : n.inputs) {
                if (step_of_value[in] >= 0) s.args.push_back(-step_of_value[in] - 1);
                else s.args.push_back(static_cast<int>(std::find(ins.begin(), ins.end(), in) - ins.begin()));
            }
            step_of_value[n.outputs[0]] = static_cast<int>(fused.body.size());
            fused.body.push_back(s);
            fused.label += std::string(fused.label.empty() ? "" : ",") + op_name(n.op);
        }
        for (int v : outs) fused.body_outputs.push_back(step_of_value[v]);
        const int at = grp.members.back();
        for (int m : grp.members) g.nodes[m].dead = true;
        replace_node(g, at, std::move(fused));
        ctx.stats["fused_elementwise"] += 1;
        ctx.stats["fused_elementwise_nodes"] += static_cast<int64_t>(grp.members.size());
    }
}

}  // namespace trnsim::compiler
