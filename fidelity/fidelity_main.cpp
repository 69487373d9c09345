// trnsim_fidelity: simulates every published kernel measurement of the fidelity
// suite and prints the comparison table, the summary and the BENCH lines.
//   trnsim_fidelity [substring]   only the cases whose name contains substring
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "fidelity.h"

using namespace trnsim::fidelity;

namespace {

std::string opt_us(double v) {
    if (v < 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}
std::string opt_n(long v) { return v < 0 ? "-" : std::to_string(v); }

// "34820.0/31675.7 (-9.0%)"; a figure published as 0 (engine unused) has no relative error.
std::string busy_text(const BusyFigure& f) {
    char buf[64];
    if (f.published_us < 0) std::snprintf(buf, sizeof buf, "-/%.1f", f.simulated_us);
    else if (f.published_us == 0) std::snprintf(buf, sizeof buf, "0/%.1f", f.simulated_us);
    else
        std::snprintf(buf, sizeof buf, "%.1f/%.1f (%+.1f%%)", f.published_us, f.simulated_us,
                      100 * (f.simulated_us - f.published_us) / f.published_us);
    return buf;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string filter = argc > 1 ? argv[1] : "";
    std::vector<Result> results;
    std::printf("%-34s %-5s %12s %12s %8s  %s\n", "case", "chip", "measured_us", "simulated_us", "error", "counted");
    for (const Case& c : all_cases()) {
        if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
        Result r = run_case(c);
        results.push_back(r);
        std::printf("%-34s %-5s %12.3f %12.3f %+7.1f%%  %s\n", c.name.c_str(), c.chip.c_str(), c.measured_us,
                    r.simulated_us, 100 * r.error, c.counted ? "yes" : ("no: " + c.not_counted_because).c_str());
        const Published& p = c.published;
        if (p.tensor_busy_us >= 0 || p.vector_busy_us >= 0 || p.scalar_busy_us >= 0 || p.dma_active_us >= 0) {
            std::printf("    busy us (published/simulated):");
            for (const BusyFigure& f : busy_figures(r)) std::printf("  %s %s", f.engine, busy_text(f).c_str());
            if (r.tensor_throttled_us > 0) std::printf("  (TE throttled %.1f)", r.tensor_throttled_us);
            std::printf("\n");
        }
        if (p.matmul_instrs >= 0 || p.vector_instrs >= 0 || p.scalar_instrs >= 0)
            std::printf("    instructions (published/simulated): matmul %s/%ld  VE %s/%ld  ACT %s/%ld\n",
                        opt_n(p.matmul_instrs).c_str(), r.matmul_instrs, opt_n(p.vector_instrs).c_str(),
                        r.vector_instrs, opt_n(p.scalar_instrs).c_str(), r.scalar_instrs);
        if (p.hbm_read_mb >= 0 || p.hbm_write_mb >= 0)
            std::printf("    HBM MB (published/simulated): read %s/%.1f  write %s/%.1f\n", opt_us(p.hbm_read_mb).c_str(),
                        r.hbm_read_mb, opt_us(p.hbm_write_mb).c_str(), r.hbm_write_mb);
        std::fflush(stdout);
    }
    if (results.empty()) {
        std::fprintf(stderr, "trnsim_fidelity: no case name contains '%s'\n", filter.c_str());
        return 2;
    }
    Summary s = summarize(results);
    std::printf("# %d counted points: median |error| %.1f%%, worst |error| %.1f%%\n", s.points,
                100 * s.median_abs_error, 100 * s.max_abs_error);
    // The same over every listed point, second sources included.
    std::vector<Case> all_counted;
    all_counted.reserve(results.size());
    for (const Result& r : results) {
        all_counted.push_back(*r.c);
        all_counted.back().counted = true;
    }
    std::vector<Result> every = results;
    for (size_t i = 0; i < every.size(); ++i) every[i].c = &all_counted[i];
    Summary e = summarize(every);
    std::printf("# all %d listed points: median |error| %.1f%%, worst |error| %.1f%%\n", e.points,
                100 * e.median_abs_error, 100 * e.max_abs_error);
    // Published busy figures (non-zero ones: a relative error needs a published time) within the bound.
    int busy_total = 0, busy_met = 0;
    std::string busy_misses;
    for (const Result& r : results)
        for (const BusyFigure& f : busy_figures(r)) {
            if (f.published_us <= 0) continue;
            ++busy_total;
            if (std::fabs(f.simulated_us - f.published_us) <= kBusyBound * f.published_us) ++busy_met;
            else busy_misses += std::string(busy_misses.empty() ? "" : ", ") + r.c->name + " " + f.engine;
        }
    std::printf("# published busy figures within %.0f%%: %d of %d%s%s\n", 100 * kBusyBound, busy_met, busy_total,
                busy_misses.empty() ? "" : "; outside: ", busy_misses.c_str());
    std::printf("BENCH fidelity_median_abs_error %.4f fraction\n", s.median_abs_error);
    std::printf("BENCH fidelity_max_abs_error %.4f fraction\n", s.max_abs_error);
    std::printf("BENCH fidelity_points %d count\n", s.points);
    std::printf("BENCH fidelity_busy_within_bound %d count\n", busy_met);
    return 0;
}
