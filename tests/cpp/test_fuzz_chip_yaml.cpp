// Fuzzing the chip configuration: random edits of every preset's YAML (a value replaced by
// another number, a string, a list, nothing; a line removed; a key renamed) either load as a
// chip or raise ConfigError naming the field; never another exception or a crash.
// TRNSIM_FUZZ_CASES sets the number of cases (default 2,000: a parse costs milliseconds).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "trnsim/chip.h"

using namespace trnsim;

namespace {

int fuzz_cases() {
    const char* v = std::getenv("TRNSIM_FUZZ_CASES");
    return v && *v ? std::atoi(v) : 2000;
}

std::vector<std::string> preset_lines(const std::string& name) {
    std::ifstream in(std::filesystem::path(chip_config_dir()) / (name + ".yaml"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// The key of a "  key: value" line (empty for comments, list items, blank lines).
std::string key_of(const std::string& line) {
    const size_t start = line.find_first_not_of(' ');
    const size_t colon = line.find(':');
    if (start == std::string::npos || colon == std::string::npos || colon < start) return "";
    if (line[start] == '#' || line[start] == '-') return "";
    return line.substr(start, colon - start);
}

struct Edit {
    std::string text;
    std::string field;   // the key whose value was changed ("" when the edit removes or renames)
    size_t line = 0;     // 1-based line of the edit
};

Edit mutate(const std::vector<std::string>& lines, std::mt19937& rng) {
    std::vector<size_t> keyed;
    for (size_t i = 0; i < lines.size(); ++i)
        if (!key_of(lines[i]).empty()) keyed.push_back(i);
    const size_t at = keyed[rng() % keyed.size()];
    const std::string key = key_of(lines[at]);
    const std::string indent = lines[at].substr(0, lines[at].find_first_not_of(' '));
    static const char* const kValues[] = {"-1", "0", "1e308", "-3.5", "4294967296", "18446744073709551616",
                                          "abc", "\"\"", "[1, 2]", "{a: 1}", "true", "nan", "1 KiB", "-4 GiB",
                                          "0.0000001", "7 parsecs", "~"};
    Edit e;
    e.line = at + 1;
    std::vector<std::string> out = lines;
    switch (rng() % 4) {
        case 0:
        case 1:
            out[at] = indent + key + ": " + kValues[rng() % std::size(kValues)];
            e.field = key;
            break;
        case 2:
            out.erase(out.begin() + static_cast<long>(at));
            break;
        default:
            out[at] = indent + key + "_x" + lines[at].substr(lines[at].find(':'));
            e.field = key + "_x";
            break;
    }
    std::ostringstream os;
    for (const std::string& l : out) os << l << '\n';
    e.text = os.str();
    return e;
}

TEST(FuzzChipYaml, EveryEditLoadsOrNamesTheField) {
    std::vector<std::vector<std::string>> presets;
    for (const char* name : {"trn1", "trn2", "trn3"}) presets.push_back(preset_lines(name));
    for (const auto& p : presets) ASSERT_GT(p.size(), 20u);
    std::mt19937 rng(20261201);
    int loaded = 0, rejected = 0;
    const int cases = fuzz_cases();
    for (int i = 0; i < cases; ++i) {
        const Edit e = mutate(presets[i % presets.size()], rng);
        try {
            const ChipConfig c = parse_chip_yaml(e.text, "fuzz.yaml");
            EXPECT_GT(c.logical_cores(), 0u);
            ++loaded;
        } catch (const ConfigError& err) {
            ++rejected;
            const std::string what = err.what();
            EXPECT_NE(what.find("fuzz.yaml"), std::string::npos) << what;
            // A value that breaks the YAML syntax (a scalar where a mapping continues) is named
            // by its position: the edited line or the one after it.
            const bool at_edit = what.find("invalid YAML") != std::string::npos &&
                                 (what.find("fuzz.yaml:" + std::to_string(e.line) + ":") != std::string::npos ||
                                  what.find("fuzz.yaml:" + std::to_string(e.line + 1) + ":") != std::string::npos);
            // A value that breaks a rule between fields names the field the rule is stated for.
            const bool names_a_field = what.find("field '") != std::string::npos;
            if (!e.field.empty() && what.find(e.field) == std::string::npos && !at_edit && !names_a_field)
                ADD_FAILURE() << "case " << i << ": the error does not name '" << e.field << "': " << what;
        } catch (const std::exception& err) {
            ADD_FAILURE() << "case " << i << ": " << typeid(err).name() << " instead of ConfigError: " << err.what();
        }
        if (::testing::Test::HasFailure()) break;
    }
    EXPECT_EQ(loaded + rejected, cases);
    EXPECT_GT(rejected, 0);
    EXPECT_GT(loaded, 0);
}

}  // namespace
