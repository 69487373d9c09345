// Chip presets: YAML loader, field checks and derived peaks.
//
// A file is read in layers: a file with "base:" first loads its base (a preset
// name or a path, relative to the file's directory), then applies its own
// fields on top; a file without "base:" must give every field. Each layer is
// checked against one field table (names, types, ranges); relations between
// fields (banks dividing the PSUM partition, lnc dividing the core count, ...)
// are checked once the layers are merged.
#include "trnsim/chip.h"
#include "trnsim/isa.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

namespace trnsim {

double ChipConfig::peak_flops_bf16() const {
    return double(tensor.rows) * tensor.cols * 2.0 * tensor.clock_ghz * 1e9;
}

double ChipConfig::peak_flops_fp8() const { return peak_flops_bf16() * tensor.fp8_speedup; }

double ChipConfig::peak_flops_fp32() const { return peak_flops_bf16() / tensor.fp32_passes; }

// GB/s (1e9 bytes/s) is numerically bytes per ns.
double ChipConfig::hbm_bytes_per_ns_per_core() const { return hbm.bandwidth_gbps / physical_cores; }

uint64_t ChipConfig::hbm_capacity_per_core() const { return hbm.capacity_bytes / physical_cores; }

namespace {

namespace fs = std::filesystem;

// ---- the field table

enum class Kind { PositiveReal, NonNegativeReal, PositiveInt, NonNegativeInt, Bytes, Bool, Text };

using FieldRef = std::variant<double*, uint32_t*, uint64_t*, bool*, std::string*>;

struct Field {
    std::string path;  // "tensor.clock_ghz"
    Kind kind;
    std::function<FieldRef(ChipConfig&)> ref;
};

void add_stream_engine(std::vector<Field>& fields, const std::string& name,
                       StreamEngineConfig ChipConfig::*engine) {
    auto member = [engine](auto m) {
        return [engine, m](ChipConfig& c) -> FieldRef { return &(c.*engine.*m); };
    };
    fields.push_back({name + ".clock_ghz", Kind::PositiveReal, member(&StreamEngineConfig::clock_ghz)});
    fields.push_back({name + ".elems_per_cycle", Kind::PositiveInt, member(&StreamEngineConfig::elems_per_cycle)});
    fields.push_back({name + ".min_ii_cycles", Kind::NonNegativeInt, member(&StreamEngineConfig::min_ii_cycles)});
    fields.push_back({name + ".fixed_overhead_cycles", Kind::NonNegativeInt,
                      member(&StreamEngineConfig::fixed_overhead_cycles)});
    fields.push_back({name + ".access_overhead_cycles", Kind::NonNegativeInt,
                      member(&StreamEngineConfig::access_overhead_cycles)});
    fields.push_back({name + ".dependent_turnaround_cycles", Kind::NonNegativeInt,
                      member(&StreamEngineConfig::dependent_turnaround_cycles)});
    fields.push_back({name + ".bf16_fast_mode", Kind::Bool, member(&StreamEngineConfig::bf16_fast_mode)});
    fields.push_back({name + ".two_input_cycles_per_elem", Kind::PositiveInt,
                      member(&StreamEngineConfig::two_input_cycles_per_elem)});
    fields.push_back({name + ".access_overhead_pipelined", Kind::Bool,
                      member(&StreamEngineConfig::access_overhead_pipelined)});
    fields.push_back({name + ".psum_access_overhead_cycles", Kind::NonNegativeInt,
                      member(&StreamEngineConfig::psum_access_overhead_cycles)});
    fields.push_back({name + ".accumulation_read_cycles", Kind::NonNegativeInt,
                      member(&StreamEngineConfig::accumulation_read_cycles)});
    fields.push_back({name + ".divide_cycles_per_elem", Kind::PositiveInt,
                      member(&StreamEngineConfig::divide_cycles_per_elem)});
    fields.push_back({name + ".cross_partition_cycles_per_elem", Kind::PositiveInt,
                      member(&StreamEngineConfig::cross_partition_cycles_per_elem)});
}

// Every YAML field, in the order of ChipConfig (and of the preset files).
const std::vector<Field>& field_table() {
    static const std::vector<Field> table = [] {
        std::vector<Field> f;
#define TRNSIM_FIELD(path, kind, expr) f.push_back({path, Kind::kind, [](ChipConfig& c) -> FieldRef { return &expr; }})
        TRNSIM_FIELD("name", Text, c.name);
        TRNSIM_FIELD("generation", PositiveInt, c.generation);
        TRNSIM_FIELD("physical_cores", PositiveInt, c.physical_cores);
        TRNSIM_FIELD("lnc", PositiveInt, c.lnc);
        TRNSIM_FIELD("tensor.clock_ghz", PositiveReal, c.tensor.clock_ghz);
        TRNSIM_FIELD("tensor.rows", PositiveInt, c.tensor.rows);
        TRNSIM_FIELD("tensor.cols", PositiveInt, c.tensor.cols);
        TRNSIM_FIELD("tensor.moving_fmax", PositiveInt, c.tensor.moving_fmax);
        TRNSIM_FIELD("tensor.min_moving_cycles", PositiveInt, c.tensor.min_moving_cycles);
        TRNSIM_FIELD("tensor.fp32_passes", PositiveInt, c.tensor.fp32_passes);
        TRNSIM_FIELD("tensor.fp8_speedup", PositiveInt, c.tensor.fp8_speedup);
        TRNSIM_FIELD("tensor.load_stationary_cycles", PositiveInt, c.tensor.load_stationary_cycles);
        TRNSIM_FIELD("tensor.load_stationary_background", Bool, c.tensor.load_stationary_background);
        TRNSIM_FIELD("tensor.dependent_turnaround_cycles", NonNegativeInt, c.tensor.dependent_turnaround_cycles);
        TRNSIM_FIELD("tensor.throttle_start_limit", PositiveReal, c.tensor.throttle_start_limit);
        TRNSIM_FIELD("tensor.throttle_ramp_ns", NonNegativeReal, c.tensor.throttle_ramp_ns);
        TRNSIM_FIELD("tensor.throttle_idle_ns", NonNegativeReal, c.tensor.throttle_idle_ns);
        add_stream_engine(f, "vector", &ChipConfig::vector);
        add_stream_engine(f, "scalar", &ChipConfig::scalar);
        add_stream_engine(f, "gpsimd", &ChipConfig::gpsimd);
        TRNSIM_FIELD("sbuf.partitions", PositiveInt, c.sbuf.partitions);
        TRNSIM_FIELD("sbuf.bytes_per_partition", Bytes, c.sbuf.bytes_per_partition);
        TRNSIM_FIELD("sbuf.min_align", PositiveInt, c.sbuf.min_align);
        TRNSIM_FIELD("psum.partitions", PositiveInt, c.psum.partitions);
        TRNSIM_FIELD("psum.bytes_per_partition", Bytes, c.psum.bytes_per_partition);
        TRNSIM_FIELD("psum.banks", PositiveInt, c.psum.banks);
        TRNSIM_FIELD("psum.min_align", PositiveInt, c.psum.min_align);
        TRNSIM_FIELD("ports.vector_gpsimd_sbuf", Bool, c.ports.vector_gpsimd_sbuf);
        TRNSIM_FIELD("ports.vector_scalar_psum", Bool, c.ports.vector_scalar_psum);
        TRNSIM_FIELD("ports.psum_same_bank_only", Bool, c.ports.psum_same_bank_only);
        TRNSIM_FIELD("dma.queues", PositiveInt, c.dma.queues);
        TRNSIM_FIELD("dma.bytes_per_ns_per_queue", PositiveReal, c.dma.bytes_per_ns_per_queue);
        TRNSIM_FIELD("dma.fixed_latency_ns", NonNegativeReal, c.dma.fixed_latency_ns);
        TRNSIM_FIELD("dma.descriptor_overhead_bytes", NonNegativeReal, c.dma.descriptor_overhead_bytes);
        TRNSIM_FIELD("dma.hbm_write_efficiency", PositiveReal, c.dma.hbm_write_efficiency);
        TRNSIM_FIELD("dma.transpose_efficiency_hbm", NonNegativeReal, c.dma.transpose_efficiency_hbm);
        TRNSIM_FIELD("dma.transpose_efficiency_sbuf", NonNegativeReal, c.dma.transpose_efficiency_sbuf);
        TRNSIM_FIELD("hbm.capacity_bytes", Bytes, c.hbm.capacity_bytes);
        TRNSIM_FIELD("hbm.bandwidth_gbps", PositiveReal, c.hbm.bandwidth_gbps);
        TRNSIM_FIELD("hbm.stacks", PositiveInt, c.hbm.stacks);
        TRNSIM_FIELD("link.neuronlink_gbps", NonNegativeReal, c.link.neuronlink_gbps);
        TRNSIM_FIELD("link.topology", Text, c.link.topology);
        TRNSIM_FIELD("sem_latency_ns", NonNegativeReal, c.sem_latency_ns);
        TRNSIM_FIELD("remote_sem_latency_ns", NonNegativeReal, c.remote_sem_latency_ns);
        TRNSIM_FIELD("launch_overhead_ns", NonNegativeReal, c.launch_overhead_ns);
#undef TRNSIM_FIELD
        return f;
    }();
    return table;
}

const Field* find_field(const std::string& path) {
    for (const Field& f : field_table())
        if (f.path == path) return &f;
    return nullptr;
}

bool is_section(const std::string& path) {
    for (const Field& f : field_table())
        if (f.path.compare(0, path.size() + 1, path + ".") == 0) return true;
    return false;
}

// Keys allowed directly under 'section' ("" = top level), for error messages.
std::string known_keys(const std::string& section) {
    std::vector<std::string> keys;
    if (section.empty()) keys = {"base"};
    const std::string prefix = section.empty() ? "" : section + ".";
    for (const Field& f : field_table()) {
        if (f.path.compare(0, prefix.size(), prefix) != 0) continue;
        std::string key = f.path.substr(prefix.size());
        key = key.substr(0, key.find('.'));
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    if (section.empty()) keys.push_back("sources");
    std::string out;
    for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
    return out;
}

// ---- errors and scalar parsing

[[noreturn]] void fail(const std::string& origin, const std::string& path, const std::string& what) {
    throw ConfigError(origin + ": field '" + path + "': " + what);
}

[[noreturn]] void expected(const std::string& origin, const std::string& path, const std::string& what,
                           const std::string& got) {
    fail(origin, path, "expected " + what + ", got '" + got + "'");
}

std::string describe(const YAML::Node& node) {
    if (node.IsScalar()) return node.Scalar();
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    return "nothing";
}

bool parse_real(const std::string& text, double& out) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc() && ptr == end && std::isfinite(out);
}

bool parse_uint(const std::string& text, uint64_t& out) {
    if (text.empty() || text[0] == '-' || text[0] == '+') return false;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc() && ptr == end;
}

// "24 MiB", "192KiB", "1.5 GiB", "1000000" -> bytes; false if malformed or not a whole number of bytes.
bool parse_bytes(const std::string& text, uint64_t& out) {
    if (parse_uint(text, out)) return true;
    static const std::pair<const char*, double> units[] = {
        {"B", 1.0},    {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
        {"KB", 1e3},   {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12}};
    size_t unit_start = text.find_first_not_of("0123456789.");
    if (unit_start == 0 || unit_start == std::string::npos) return false;
    const size_t unit_pos = text.find_first_not_of(' ', unit_start);
    if (unit_pos == std::string::npos) return false;
    const std::string number = text.substr(0, unit_start);
    const std::string unit = text.substr(unit_pos);
    double value = 0;
    if (!parse_real(number, value)) return false;
    for (const auto& [name, scale] : units) {
        if (unit != name) continue;
        double bytes = value * scale;
        if (bytes < 1 || bytes > 1.8e19 || bytes != std::floor(bytes)) return false;
        out = static_cast<uint64_t>(bytes);
        return true;
    }
    return false;
}

void set_field(const Field& field, const YAML::Node& node, ChipConfig& cfg, const std::string& origin) {
    const std::string got = describe(node);
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    const bool scalar = node.IsScalar();
    FieldRef ref = field.ref(cfg);
    double real = 0;
    uint64_t count = 0;
    switch (field.kind) {
        case Kind::PositiveReal:
            if (!scalar || !parse_real(text, real) || real <= 0)
                expected(origin, field.path, "a positive number", got);
            *std::get<double*>(ref) = real;
            return;
        case Kind::NonNegativeReal:
            if (!scalar || !parse_real(text, real) || real < 0)
                expected(origin, field.path, "a non-negative number", got);
            *std::get<double*>(ref) = real;
            return;
        case Kind::PositiveInt:
        case Kind::NonNegativeInt: {
            const bool positive = field.kind == Kind::PositiveInt;
            if (!scalar || !parse_uint(text, count) || (positive && count == 0) || count > UINT32_MAX)
                expected(origin, field.path, positive ? "a positive integer" : "a non-negative integer", got);
            *std::get<uint32_t*>(ref) = static_cast<uint32_t>(count);
            return;
        }
        case Kind::Bytes:
            if (!scalar || !parse_bytes(text, count) || count == 0)
                expected(origin, field.path, "a positive size in bytes (an integer or e.g. '24 MiB')", got);
            *std::get<uint64_t*>(ref) = count;
            return;
        case Kind::Bool:
            if (!scalar || (text != "true" && text != "false")) expected(origin, field.path, "true or false", got);
            *std::get<bool*>(ref) = text == "true";
            return;
        case Kind::Text:
            if (!scalar || text.empty()) expected(origin, field.path, "a non-empty string", got);
            *std::get<std::string*>(ref) = text;
            return;
    }
}

// ---- one layer

struct Layer {
    ChipConfig& cfg;
    const std::string& origin;
    std::set<std::string> seen;  // field paths this layer set
};

void apply_map(const YAML::Node& map, const std::string& section, Layer& layer) {
    for (const auto& entry : map) {
        const std::string key = entry.first.Scalar();
        const std::string path = section.empty() ? key : section + "." + key;
        if (const Field* field = find_field(path)) {
            set_field(*field, entry.second, layer.cfg, layer.origin);
            layer.seen.insert(path);
        } else if (is_section(path)) {
            if (!entry.second.IsMap()) expected(layer.origin, path, "a map of fields", describe(entry.second));
            apply_map(entry.second, path, layer);
        } else {
            const std::string where = section.empty() ? "top-level fields" : "fields in '" + section + "'";
            fail(layer.origin, path, "unknown field (known " + where + ": " + known_keys(section) + ")");
        }
    }
}

void apply_sources(const YAML::Node& node, Layer& layer) {
    if (!node.IsMap()) expected(layer.origin, "sources", "a map of field path -> citation", describe(node));
    for (const auto& entry : node) {
        const std::string key = entry.first.Scalar();
        if (!find_field(key))
            fail(layer.origin, "sources." + key,
                 "names no field (sources keys are field paths, e.g. 'tensor.clock_ghz')");
        if (!entry.second.IsScalar() || entry.second.Scalar().empty())
            expected(layer.origin, "sources." + key, "a citation string", describe(entry.second));
        layer.cfg.sources[key] = entry.second.Scalar();
    }
}

// ---- checks across fields (on the merged config)

void check_partitions(const std::string& origin, const std::string& path, uint32_t partitions) {
    if (partitions > 128) expected(origin, path, "a partition count in 1..128", std::to_string(partitions));
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

void check_relations(const ChipConfig& c, const std::string& origin) {
    auto num = [](auto v) {
        std::ostringstream s;
        s << v;
        return s.str();
    };
    if (c.generation < 2 || c.generation > 4)
        expected(origin, "generation", "2, 3 or 4 (NeuronCore-v2 trn1, v3 trn2, v4 trn3)", num(c.generation));
    if (c.physical_cores % c.lnc != 0)
        expected(origin, "lnc", "a divisor of physical_cores (" + num(c.physical_cores) + ")", num(c.lnc));
    if (c.dma.queues > kMaxDmaQueues)
        expected(origin, "dma.queues", "at most " + num(kMaxDmaQueues) + " queues per physical core", num(c.dma.queues));
    if (c.lnc > kMaxPhysicalCores)
        expected(origin, "lnc", "1 or 2 (Neuron groups at most two physical cores into a logical core)", num(c.lnc));
    if (c.lnc > 1 && c.generation < 3)
        expected(origin, "lnc", "1 on NeuronCore-v" + num(c.generation) +
                 " (logical cores of two physical cores exist from NeuronCore-v3, trn2)", num(c.lnc));
    check_partitions(origin, "sbuf.partitions", c.sbuf.partitions);
    check_partitions(origin, "psum.partitions", c.psum.partitions);
    if (c.tensor.rows > c.sbuf.partitions)
        expected(origin, "tensor.rows", "at most sbuf.partitions (" + num(c.sbuf.partitions) + ")", num(c.tensor.rows));
    if (c.tensor.cols > c.psum.partitions)
        expected(origin, "tensor.cols", "at most psum.partitions (" + num(c.psum.partitions) + ")", num(c.tensor.cols));
    if (uint64_t(c.tensor.moving_fmax) * 4 > c.psum.bytes_per_partition)
        expected(origin, "tensor.moving_fmax",
                 "at most " + num(c.psum.bytes_per_partition / 4) + " (fp32 results must fit in one PSUM partition)",
                 num(c.tensor.moving_fmax));
    if (!is_power_of_two(c.sbuf.min_align)) expected(origin, "sbuf.min_align", "a power of two", num(c.sbuf.min_align));
    if (!is_power_of_two(c.psum.min_align)) expected(origin, "psum.min_align", "a power of two", num(c.psum.min_align));
    if (c.sbuf.bytes_per_partition % c.sbuf.min_align != 0)
        expected(origin, "sbuf.bytes_per_partition", "a multiple of sbuf.min_align (" + num(c.sbuf.min_align) + ")",
                 num(c.sbuf.bytes_per_partition));
    if (c.psum.bytes_per_partition % c.psum.banks != 0)
        expected(origin, "psum.banks",
                 "a divisor of psum.bytes_per_partition (" + num(c.psum.bytes_per_partition) + ")", num(c.psum.banks));
    if (c.tensor.throttle_start_limit > 1)
        expected(origin, "tensor.throttle_start_limit", "a utilization limit in (0, 1] (1: no throttling)",
                 num(c.tensor.throttle_start_limit));
    if (c.tensor.throttle_start_limit < 1 && c.tensor.throttle_ramp_ns <= 0)
        expected(origin, "tensor.throttle_ramp_ns",
                 "a positive ramp time when tensor.throttle_start_limit is below 1", num(c.tensor.throttle_ramp_ns));
    if (c.psum.bank_bytes() % c.psum.min_align != 0)
        expected(origin, "psum.banks",
                 "banks of a multiple of psum.min_align (" + num(c.psum.min_align) + ") bytes, giving " +
                     num(c.psum.bank_bytes()) + "-byte banks",
                 num(c.psum.banks));
}

// ---- files and presets

std::string read_text(const std::string& path, const std::string& referrer) {
    std::ifstream in(path);
    if (!in) {
        if (referrer.empty()) throw ConfigError(path + ": cannot open chip config file");
        fail(referrer, "base", "cannot open chip config file '" + path + "'");
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> available_presets(const std::string& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

bool is_preset_name(const std::string& s) {
    auto ends_with = [&](const std::string& suffix) {
        return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return s.find('/') == std::string::npos && !ends_with(".yaml") && !ends_with(".yml");
}

// A preset name -> its file; anything else is a path (relative ones taken from 'relative_to').
std::string resolve(const std::string& name_or_path, const fs::path& relative_to, const std::string& referrer) {
    if (!is_preset_name(name_or_path)) {
        fs::path p(name_or_path);
        return (p.is_relative() && !relative_to.empty() ? relative_to / p : p).string();
    }
    const std::string dir = chip_config_dir();
    const std::string file = (fs::path(dir) / (name_or_path + ".yaml")).string();
    if (fs::exists(file)) return file;
    std::string list;
    for (const std::string& n : available_presets(dir)) list += (list.empty() ? "" : ", ") + n;
    const std::string what = "unknown chip preset '" + name_or_path + "' (presets in " + dir + ": " +
                             (list.empty() ? "none" : list) + ")";
    if (referrer.empty()) throw ConfigError(name_or_path + ": " + what);
    fail(referrer, "base", what);
}

ChipConfig parse_layered(const std::string& text, const std::string& origin, std::vector<std::string>& chain);

ChipConfig load_file(const std::string& path, const std::string& referrer, std::vector<std::string>& chain) {
    const std::string canonical = fs::weakly_canonical(path).string();
    if (std::find(chain.begin(), chain.end(), canonical) != chain.end())
        fail(referrer, "base", "'" + path + "' is already being loaded (a cycle of base: files)");
    const std::string text = read_text(path, referrer);
    chain.push_back(canonical);
    ChipConfig cfg = parse_layered(text, path, chain);
    chain.pop_back();
    return cfg;
}

ChipConfig parse_layered(const std::string& text, const std::string& origin, std::vector<std::string>& chain) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                          ": invalid YAML: " + e.msg);
    }
    if (!root.IsMap()) throw ConfigError(origin + ": expected a map of chip fields at the top level");

    ChipConfig cfg;
    const YAML::Node base = root["base"];
    if (base) {
        if (!base.IsScalar() || base.Scalar().empty())
            expected(origin, "base", "a preset name or a file path", describe(base));
        const fs::path dir = fs::path(origin).parent_path();
        cfg = load_file(resolve(base.Scalar(), dir, origin), origin, chain);
    }

    Layer layer{cfg, origin, {}};
    YAML::Node fields = YAML::Clone(root);
    fields.remove("base");
    fields.remove("sources");
    apply_map(fields, "", layer);

    if (!base) {
        for (const Field& f : field_table())
            if (!layer.seen.count(f.path))
                fail(origin, f.path, "missing (a file without 'base:' must give every field)");
    } else {
        // A value this file changes no longer follows the base's citation.
        for (const std::string& path : layer.seen) cfg.sources[path] = "set in " + origin;
    }
    if (const YAML::Node sources = root["sources"]) apply_sources(sources, layer);

    check_relations(cfg, origin);
    cfg.source_file = origin;
    return cfg;
}

}  // namespace

std::string chip_config_dir() {
    if (const char* dir = std::getenv("TRNSIM_CONFIG_DIR"); dir && *dir) return dir;
#ifdef TRNSIM_SOURCE_CONFIG_DIR
    return TRNSIM_SOURCE_CONFIG_DIR;
#else
    return "configs/chips";
#endif
}

ChipConfig load_chip(const std::string& name_or_path) {
    std::vector<std::string> chain;
    ChipConfig cfg = load_file(resolve(name_or_path, {}, ""), "", chain);
    // TRNSIM_LNC plays the part of Neuron's NEURON_LOGICAL_NC_CONFIG: physical cores per device.
    if (const char* lnc = std::getenv("TRNSIM_LNC"); lnc && *lnc) {
        const std::string text = lnc;
        if (text != "1" && text != "2")
            throw ConfigError("TRNSIM_LNC=" + text + ": expected 1 or 2 (physical NeuronCores per logical core)");
        cfg.lnc = static_cast<uint32_t>(std::stoul(text));
        cfg.sources["lnc"] = "set by TRNSIM_LNC=" + text;
        check_relations(cfg, "TRNSIM_LNC=" + text + " on " + cfg.source_file);
    }
    return cfg;
}

ChipConfig parse_chip_yaml(const std::string& yaml_text, const std::string& origin) {
    std::vector<std::string> chain;
    return parse_layered(yaml_text, origin, chain);
}

}  // namespace trnsim
