// Chip presets and the YAML config loader: presets load with their published
// numbers, derived peaks match the published per-core figures, user files
// override presets through "base:", and every bad input names file and field.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "trnsim/chip.h"

namespace fs = std::filesystem;
using trnsim::ChipConfig;
using trnsim::ConfigError;
using trnsim::load_chip;
using trnsim::parse_chip_yaml;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

// A fresh directory for the YAML files one test writes.
class ChipFiles : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() /
               ("trnsim_test_chip_" + std::to_string(getpid()) + "_" + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& name, const std::string& text) {
        const fs::path path = dir_ / name;
        std::ofstream(path) << text;
        return path.string();
    }

    // The ConfigError message loading 'path' throws (fails the test if none).
    static std::string load_error(const std::string& path) {
        try {
            load_chip(path);
        } catch (const ConfigError& e) {
            return e.what();
        }
        ADD_FAILURE() << "loading " << path << " did not throw ConfigError";
        return "";
    }

    fs::path dir_;
};

bool near(double value, double expected, double rel) { return std::abs(value - expected) <= rel * expected; }

// Every leaf under 'node' as a dotted path.
void leaf_paths(const YAML::Node& node, const std::string& prefix, std::vector<std::string>& out) {
    for (const auto& entry : node) {
        const std::string path = prefix.empty() ? entry.first.Scalar() : prefix + "." + entry.first.Scalar();
        if (entry.second.IsMap())
            leaf_paths(entry.second, path, out);
        else
            out.push_back(path);
    }
}

}  // namespace

// ---- presets

TEST(ChipPresets, EachPresetLoadsWithItsName) {
    for (const std::string name : {"trn1", "trn2", "trn3"}) {
        ChipConfig chip = load_chip(name);
        EXPECT_EQ(chip.name, name);
        EXPECT_EQ(fs::path(chip.source_file).filename(), name + ".yaml");
    }
}

TEST(ChipPresets, EveryPresetNumberCitesASource) {
    for (const std::string name : {"trn1", "trn2", "trn3"}) {
        const std::string file = (fs::path(trnsim::chip_config_dir()) / (name + ".yaml")).string();
        YAML::Node root = YAML::LoadFile(file);
        std::vector<std::string> paths;
        leaf_paths(root, "", paths);
        ChipConfig chip = load_chip(name);
        for (const std::string& path : paths) {
            if (path == "name" || path.rfind("sources.", 0) == 0) continue;
            auto it = chip.sources.find(path);
            EXPECT_TRUE(it != chip.sources.end() && !it->second.empty()) << name << ": no source for " << path;
        }
    }
}

TEST(ChipPresets, PublishedStructure) {
    ChipConfig trn1 = load_chip("trn1"), trn2 = load_chip("trn2"), trn3 = load_chip("trn3");
    EXPECT_EQ(trn1.generation, 2u);
    EXPECT_EQ(trn2.generation, 3u);
    EXPECT_EQ(trn3.generation, 4u);
    EXPECT_EQ(trn1.logical_cores(), 2u);
    EXPECT_EQ(trn2.logical_cores(), 4u);  // 8 physical at LNC=2
    EXPECT_EQ(trn1.sbuf.bytes_per_partition * trn1.sbuf.partitions, 24ull << 20);
    EXPECT_EQ(trn2.sbuf.bytes_per_partition * trn2.sbuf.partitions, 28ull << 20);
    EXPECT_EQ(trn3.sbuf.bytes_per_partition * trn3.sbuf.partitions, 32ull << 20);
    for (const ChipConfig* chip : {&trn1, &trn2, &trn3}) {
        EXPECT_EQ(chip->psum.bank_bytes(), 2048u) << chip->name;  // 512 fp32 per bank
        EXPECT_EQ(chip->dma.queues, 16u);
        EXPECT_EQ(chip->tensor.moving_fmax, 512u);
        EXPECT_EQ(chip->tensor.min_moving_cycles, 64u);
    }
    EXPECT_DOUBLE_EQ(trn1.dma.bytes_per_ns_per_queue, 17);
    EXPECT_DOUBLE_EQ(trn2.dma.bytes_per_ns_per_queue, 23);
    EXPECT_DOUBLE_EQ(trn3.dma.bytes_per_ns_per_queue, 33);
    EXPECT_EQ(trn3.link.topology, "switched");
}

TEST(ChipPresets, DerivedPeaksMatchPublishedPerCoreNumbers) {
    ChipConfig trn1 = load_chip("trn1"), trn2 = load_chip("trn2"), trn3 = load_chip("trn3");
    EXPECT_TRUE(near(trn1.peak_flops_bf16(), 91.75e12, 0.01)) << trn1.peak_flops_bf16();
    EXPECT_TRUE(near(trn1.peak_flops_fp8(), 91.75e12, 0.01));  // cFP8 at the BF16 rate
    EXPECT_TRUE(near(trn1.peak_flops_fp32(), 23e12, 0.01));
    EXPECT_TRUE(near(trn2.peak_flops_bf16(), 78.64e12, 0.01)) << trn2.peak_flops_bf16();
    EXPECT_TRUE(near(trn2.peak_flops_fp8(), 157e12, 0.01)) << trn2.peak_flops_fp8();
    EXPECT_TRUE(near(trn2.peak_flops_fp32(), 19.66e12, 0.01)) << trn2.peak_flops_fp32();
    EXPECT_TRUE(near(trn3.peak_flops_bf16(), 78.64e12, 0.01));
    // Exactly the formula, no stored peak.
    EXPECT_DOUBLE_EQ(trn2.peak_flops_bf16(), 128.0 * 128 * 2 * 2.4e9);
}

TEST(ChipPresets, HbmPerCoreShare) {
    ChipConfig trn1 = load_chip("trn1"), trn2 = load_chip("trn2");
    EXPECT_EQ(trn2.hbm.capacity_bytes, 96 * kGiB);
    EXPECT_EQ(trn2.hbm_capacity_per_core(), 12 * kGiB);
    EXPECT_EQ(trn2.hbm_capacity_per_logical_core(), 24 * kGiB);  // one 24 GiB stack per logical core
    EXPECT_DOUBLE_EQ(trn2.hbm_bytes_per_ns_per_core(), 2900.0 / 8);
    EXPECT_EQ(trn1.hbm_capacity_per_core(), 16 * kGiB);
    EXPECT_DOUBLE_EQ(trn1.hbm_bytes_per_ns_per_core(), 410);
}

// ---- user files with base:

TEST_F(ChipFiles, OverrideFileDeepMergesOverPreset) {
    const std::string path = write("my.yaml", R"(
base: trn2
name: trn2-fast
tensor:
  clock_ghz: 3.0
hbm:
  capacity_bytes: 48 GiB
sources:
  hbm.capacity_bytes: "half-size part"
)");
    ChipConfig chip = load_chip(path);
    ChipConfig trn2 = load_chip("trn2");
    EXPECT_EQ(chip.name, "trn2-fast");
    EXPECT_EQ(chip.source_file, path);
    EXPECT_DOUBLE_EQ(chip.tensor.clock_ghz, 3.0);
    EXPECT_EQ(chip.tensor.rows, trn2.tensor.rows);  // siblings in an overridden section are kept
    EXPECT_EQ(chip.hbm.capacity_bytes, 48 * kGiB);
    EXPECT_DOUBLE_EQ(chip.hbm.bandwidth_gbps, trn2.hbm.bandwidth_gbps);
    EXPECT_DOUBLE_EQ(chip.vector.clock_ghz, trn2.vector.clock_ghz);
    EXPECT_EQ(chip.lnc, 2u);
    EXPECT_TRUE(near(chip.peak_flops_bf16(), 128.0 * 128 * 2 * 3.0e9, 1e-12));
    // A changed value no longer carries the preset's citation.
    EXPECT_EQ(chip.sources.at("tensor.clock_ghz"), "set in " + path);
    EXPECT_EQ(chip.sources.at("hbm.capacity_bytes"), "half-size part");
    EXPECT_EQ(chip.sources.at("vector.clock_ghz"), trn2.sources.at("vector.clock_ghz"));
}

TEST_F(ChipFiles, BasePathIsRelativeToTheFile) {
    write("small.yaml", "base: trn1\nsbuf:\n  bytes_per_partition: 96 KiB\n");
    fs::create_directories(dir_ / "sub");
    const std::string path = write("sub/smaller.yaml", "base: ../small.yaml\npsum:\n  banks: 4\n");
    ChipConfig chip = load_chip(path);
    EXPECT_EQ(chip.name, "trn1");
    EXPECT_EQ(chip.sbuf.bytes_per_partition, 96u * 1024);
    EXPECT_EQ(chip.psum.banks, 4u);
    EXPECT_EQ(chip.psum.bank_bytes(), 4096u);
    EXPECT_DOUBLE_EQ(chip.tensor.clock_ghz, 2.8);
}

TEST_F(ChipFiles, ByteSizesAcceptUnits) {
    const char* cases[][2] = {{"1048576", "1048576"}, {"24 MiB", "25165824"}, {"192KiB", "196608"},
                              {"1.5 GiB", "1610612736"}, {"2 GB", "2000000000"}, {"512 B", "512"}};
    for (const auto& [text, bytes] : cases) {
        ChipConfig chip = parse_chip_yaml(std::string("base: trn2\nhbm:\n  capacity_bytes: ") + text, "units.yaml");
        EXPECT_EQ(chip.hbm.capacity_bytes, std::stoull(bytes)) << text;
    }
    for (const char* bad : {"24 MiB/s", "MiB", "-1 GiB", "0.3 B", "24 mib", "0"}) {
        try {
            parse_chip_yaml(std::string("base: trn2\nhbm:\n  capacity_bytes: ") + bad, "units.yaml");
            ADD_FAILURE() << "accepted " << bad;
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("units.yaml: field 'hbm.capacity_bytes'"), std::string::npos)
                << e.what();
        }
    }
}

TEST_F(ChipFiles, ConfigDirFromEnvironment) {
    std::string text;
    {
        std::ifstream in(fs::path(trnsim::chip_config_dir()) / "trn2.yaml");
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    write("mychip.yaml", text);
    const char* previous = std::getenv("TRNSIM_CONFIG_DIR");
    const std::string saved = previous ? previous : "";
    setenv("TRNSIM_CONFIG_DIR", dir_.c_str(), 1);
    EXPECT_EQ(trnsim::chip_config_dir(), dir_.string());
    ChipConfig chip = load_chip("mychip");
    if (previous)
        setenv("TRNSIM_CONFIG_DIR", saved.c_str(), 1);
    else
        unsetenv("TRNSIM_CONFIG_DIR");
    EXPECT_EQ(chip.name, "trn2");
    EXPECT_EQ(fs::path(chip.source_file).parent_path(), dir_);
}

// ---- errors name the file and the field

TEST_F(ChipFiles, UnknownFieldIsNamed) {
    const std::string msg = load_error(write("typo.yaml", "base: trn2\ntensor:\n  clockghz: 3\n"));
    EXPECT_NE(msg.find("typo.yaml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'tensor.clockghz'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("clock_ghz"), std::string::npos) << msg;  // lists what is known there

    const std::string top = load_error(write("top.yaml", "base: trn2\nfrequency: 3\n"));
    EXPECT_NE(top.find("top.yaml: field 'frequency': unknown field"), std::string::npos) << top;

    const std::string src = load_error(write("src.yaml", "base: trn2\nsources:\n  tensor.speed: x\n"));
    EXPECT_NE(src.find("src.yaml: field 'sources.tensor.speed'"), std::string::npos) << src;
}

TEST_F(ChipFiles, WrongTypeIsNamed) {
    const std::string msg = load_error(write("my.yaml", "base: trn2\ntensor:\n  clock_ghz: fast\n"));
    EXPECT_NE(msg.find("my.yaml: field 'tensor.clock_ghz': expected a positive number, got 'fast'"), std::string::npos)
        << msg;
    const struct {
        const char* yaml;
        const char* field;
    } cases[] = {
        {"tensor: 5", "'tensor': expected a map"},
        {"physical_cores: 2.5", "'physical_cores': expected a positive integer"},
        {"dma:\n  queues: [1, 2]", "'dma.queues': expected a positive integer, got 'a list'"},
        {"vector:\n  bf16_fast_mode: maybe", "'vector.bf16_fast_mode': expected true or false"},
        {"link:\n  topology:", "'link.topology': expected a non-empty string"},
        {"sources: just text", "'sources': expected a map"},
    };
    for (const auto& c : cases) {
        const std::string err = load_error(write("bad.yaml", std::string("base: trn2\n") + c.yaml + "\n"));
        EXPECT_NE(err.find("bad.yaml: field "), std::string::npos) << err;
        EXPECT_NE(err.find(c.field), std::string::npos) << err;
    }
}

TEST_F(ChipFiles, ImpossibleValueIsNamed) {
    const struct {
        const char* yaml;
        const char* message;
    } cases[] = {
        {"tensor:\n  clock_ghz: 0", "field 'tensor.clock_ghz': expected a positive number, got '0'"},
        {"vector:\n  clock_ghz: -1.2", "field 'vector.clock_ghz': expected a positive number"},
        {"sbuf:\n  partitions: 129", "field 'sbuf.partitions': expected a partition count in 1..128, got '129'"},
        {"psum:\n  partitions: 0", "field 'psum.partitions': expected a positive integer"},
        {"psum:\n  banks: 3", "field 'psum.banks': expected a divisor of psum.bytes_per_partition (16384), got '3'"},
        {"lnc: 3", "field 'lnc': expected a divisor of physical_cores (8), got '3'"},
        {"generation: 7", "field 'generation': expected 2, 3 or 4"},
        {"sbuf:\n  min_align: 6", "field 'sbuf.min_align': expected a power of two"},
        {"tensor:\n  rows: 256", "field 'tensor.rows': expected at most sbuf.partitions (128)"},
        {"tensor:\n  moving_fmax: 8192", "field 'tensor.moving_fmax': expected at most 4096"},
        {"dma:\n  fixed_latency_ns: -5", "field 'dma.fixed_latency_ns': expected a non-negative number"},
    };
    for (const auto& c : cases) {
        const std::string err = load_error(write("impossible.yaml", std::string("base: trn2\n") + c.yaml + "\n"));
        EXPECT_NE(err.find(std::string("impossible.yaml: ") + c.message), std::string::npos) << err;
    }
}

TEST_F(ChipFiles, FileWithoutBaseMustGiveEveryField) {
    const std::string msg = load_error(write("partial.yaml", "name: tiny\ngeneration: 3\n"));
    EXPECT_NE(msg.find("partial.yaml: field 'physical_cores': missing"), std::string::npos) << msg;
}

TEST_F(ChipFiles, UnknownPresetListsTheAvailableOnes) {
    for (const std::string& msg : {load_error("trn9"), load_error(write("b.yaml", "base: trn9\n"))}) {
        EXPECT_NE(msg.find("unknown chip preset 'trn9'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("trn1, trn2, trn3"), std::string::npos) << msg;
    }
    EXPECT_NE(load_error(write("b.yaml", "base: trn9\n")).find("b.yaml: field 'base'"), std::string::npos);
}

TEST_F(ChipFiles, MissingFileIsNamed) {
    const std::string missing = (dir_ / "nowhere.yaml").string();
    EXPECT_NE(load_error(missing).find(missing), std::string::npos);
    const std::string msg = load_error(write("child.yaml", "base: gone/parent.yaml\n"));
    EXPECT_NE(msg.find("child.yaml: field 'base'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parent.yaml"), std::string::npos) << msg;
}

TEST_F(ChipFiles, BaseCycleIsAnError) {
    write("a.yaml", "base: b.yaml\n");
    const std::string msg = load_error(write("b.yaml", "base: a.yaml\n"));
    EXPECT_NE(msg.find("cycle"), std::string::npos) << msg;
}

TEST(ChipParse, SyntaxErrorNamesOriginAndLine) {
    try {
        parse_chip_yaml("base: trn2\ntensor: {clock_ghz: 3\n", "broken.yaml");
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("broken.yaml:", 0), 0u) << e.what();
    }
    EXPECT_THROW(parse_chip_yaml("- just\n- a list\n", "list.yaml"), ConfigError);
}
