// Runs fidelity cases on the timing model and compares them with the measurements.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "fidelity.h"
#include "trnsim/sim.h"

namespace trnsim::fidelity {

namespace {

// Time during which at least one DMA queue moves data.
int64_t dma_active_ps(const std::vector<InstrRecord>& rec) {
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const InstrRecord& r : rec)
        if (r.op == Opcode::dma_copy && r.end_ps > r.start_ps) iv.emplace_back(r.start_ps, r.end_ps);
    std::sort(iv.begin(), iv.end());
    int64_t total = 0, cur_s = 0, cur_e = -1;
    for (auto [s, e] : iv) {
        if (s > cur_e) {
            if (cur_e > cur_s) total += cur_e - cur_s;
            cur_s = s;
            cur_e = e;
        } else {
            cur_e = std::max(cur_e, e);
        }
    }
    if (cur_e > cur_s) total += cur_e - cur_s;
    return total;
}

}  // namespace

std::vector<BusyFigure> busy_figures(const Result& r) {
    const Published& p = r.c->published;
    return {{"TE", p.tensor_busy_us, r.tensor_busy_us},
            {"VE", p.vector_busy_us, r.vector_busy_us},
            {"ACT", p.scalar_busy_us, r.scalar_busy_us},
            {"DMA", p.dma_active_us, r.dma_active_us}};
}

// Published kernel measurements are runs on one physical NeuronCore: the cases run at LNC=1.
Result run_case(const Case& c) {
    ChipConfig chip = load_chip(c.chip);
    chip.lnc = 1;
    return run_case(c, chip);
}

Result run_case(const Case& c, const ChipConfig& chip) {
    NeuronCore core(chip, ExecMode::TimingOnly);
    std::vector<InstrRecord> rec;
    RunStats st;
    double read_bytes = 0, write_bytes = 0;
    for (const Program& prog : c.build(chip)) {
        st.add(core.run(prog, &rec));
        for (const Instruction& ins : prog.instrs) {
            if (ins.op != Opcode::dma_copy) continue;
            const double bytes = static_cast<double>(ins.src0.elems() * dtype_size(ins.src0.dtype));
            if (ins.src0.space == MemSpace::HBM) read_bytes += bytes;
            if (ins.dst.space == MemSpace::HBM) write_bytes += bytes;
        }
    }

    Result r;
    r.c = &c;
    if (c.method == Method::Instruction) {
        if (c.probe < 0 || static_cast<size_t>(c.probe) >= rec.size() || (c.probe_interval && c.probe == 0))
            throw std::logic_error("fidelity case " + c.name + ": probe outside the program");
        const InstrRecord& p = rec[static_cast<size_t>(c.probe)];
        r.simulated_us = (c.probe_interval ? p.start_ps - rec[static_cast<size_t>(c.probe) - 1].start_ps
                                           : p.end_ps - p.start_ps) / 1e6;
    } else {
        r.simulated_us = st.duration_ps() / 1e6 + chip.launch_overhead_ns / 1e3;
    }
    r.error = (r.simulated_us - c.measured_us) / c.measured_us;
    auto busy = [&](Engine e) { return st.busy_ps[static_cast<size_t>(e)] / 1e6; };
    r.tensor_busy_us = busy(Engine::Tensor);
    r.vector_busy_us = busy(Engine::Vector);
    r.scalar_busy_us = busy(Engine::Scalar);
    r.gpsimd_busy_us = busy(Engine::GpSimd);
    r.dma_active_us = dma_active_ps(rec) / 1e6;
    r.hbm_read_mb = read_bytes / 1e6;
    r.hbm_write_mb = write_bytes / 1e6;
    for (const InstrRecord& x : rec) {
        r.tensor_throttled_us += x.throttled_ps / 1e6;
        if (x.op == Opcode::barrier) continue;
        ++r.instructions;
        if (x.op == Opcode::nc_matmul) ++r.matmul_instrs;
        if (x.queue == static_cast<uint8_t>(Engine::Vector)) ++r.vector_instrs;
        if (x.queue == static_cast<uint8_t>(Engine::Scalar)) ++r.scalar_instrs;
    }
    return r;
}

Summary summarize(const std::vector<Result>& results) {
    std::vector<double> errs;
    for (const Result& r : results)
        if (r.c->counted) errs.push_back(std::fabs(r.error));
    Summary s;
    s.points = static_cast<int>(errs.size());
    if (errs.empty()) return s;
    std::sort(errs.begin(), errs.end());
    const size_t n = errs.size();
    s.median_abs_error = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
    s.max_abs_error = errs.back();
    return s;
}

const Case& find_case(const std::string& name) {
    for (const Case& c : all_cases())
        if (c.name == name) return c;
    throw std::out_of_range("no fidelity case named " + name);
}

}  // namespace trnsim::fidelity
