// The pass pipeline, the dump directory, and compile(): passes, memory plan, lowering.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "passes.h"
#include "trnsim/compiler.h"

namespace trnsim::compiler {

namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream f(path);
    if (!f) throw CompileError("cannot write " + path.string());
    f << text;
}

std::filesystem::path dump_path(const CompileOptions& options, const std::string& graph_name) {
    std::filesystem::path dir = std::filesystem::path(options.dump_dir) / graph_name;
    std::filesystem::create_directories(dir);
    return dir;
}

}  // namespace

std::vector<Pass> default_pipeline() {
    return {
        {"canonicalize", canonicalize},
        {"fuse_softmax", fuse_softmax},
        {"fuse_attention", fuse_attention},
        {"fuse_norm", fuse_norm},
        {"fuse_matmul_epilogue", fuse_matmul_epilogue},
        {"fuse_matmul_column_sums", fuse_matmul_column_sums},
        {"fuse_elementwise", fuse_elementwise},
        {"schedule", schedule},
    };
}

void run_passes(Graph& g, const std::vector<Pass>& passes, PassContext& ctx) {
    const bool dump = !ctx.options.dump_dir.empty();
    std::filesystem::path dir;
    if (dump) {
        dir = dump_path(ctx.options, g.name);
        write_file(dir / "00_input.ir", g.str());
    }
    int index = 1;
    for (const Pass& p : passes) {
        const auto& off = ctx.options.disabled_passes;
        const bool is_fusion = p.name.rfind("fuse_", 0) == 0;
        if (std::find(off.begin(), off.end(), p.name) != off.end() || (is_fusion && !ctx.options.fuse)) continue;
        p.run(g, ctx);
        g.verify();
        if (dump) {
            char prefix[16];
            std::snprintf(prefix, sizeof prefix, "%02d_", index);
            write_file(dir / (prefix + p.name + ".ir"), g.str());
        }
        ++index;
    }
}

std::string CompiledGraph::disassembly() const {
    std::string text;
    for (size_t i = 0; i < segments.size(); ++i) {
        const Segment& s = segments[i];
        text += "; segment " + std::to_string(i);
        if (s.eager) {
            text += ": eager node " + std::to_string(s.node) + "\n";
            continue;
        }
        text += ": program '" + s.program.name + "', args = slots [";
        for (size_t k = 0; k < s.arg_slots.size(); ++k) text += (k ? ", " : "") + std::to_string(s.arg_slots[k]);
        text += "]\n" + trnsim::disassemble(s.program) + "\n";
    }
    return text;
}

CompiledGraph compile(Graph g, const ChipConfig& chip, const CompileOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    g.verify();
    PassContext ctx{chip, options, {}};
    run_passes(g, default_pipeline(), ctx);

    CompiledGraph cg;
    cg.name = g.name;
    cg.memory = plan_memory(g, ctx);
    cg.segments = lower_to_program(g, cg.memory, chip);
    for (int v : g.outputs) cg.outputs.push_back(cg.memory.place(g, v));
    int64_t instructions = 0, programs = 0;
    for (const Segment& s : cg.segments) {
        if (s.eager) {
            const Node& n = g.nodes[s.node];
            std::vector<Placement> ins;
            for (int v : n.inputs) ins.push_back(cg.memory.place(g, v));
            cg.eager_inputs.push_back(std::move(ins));
            cg.eager_labels.push_back(n.label);
            cg.eager_ids.push_back(n.eager_id);
        } else {
            instructions += static_cast<int64_t>(s.program.instrs.size());
            ++programs;
        }
    }
    cg.stats = ctx.stats;
    cg.stats["programs"] = programs;
    cg.stats["instructions"] = instructions;
    cg.stats["eager_nodes"] = static_cast<int64_t>(cg.eager_labels.size());
    cg.stats["workspace_bytes"] = cg.memory.workspace_bytes;
    cg.ir = g.str();
    if (!options.dump_dir.empty()) {
        const std::filesystem::path dir = dump_path(options, g.name);
        write_file(dir / "program.txt", cg.disassembly());
    }
    cg.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return cg;
}

}  // namespace trnsim::compiler
