// Interrupting long simulations (Ctrl-C in a notebook or a script).
//
// interrupt_runs() makes every NeuronCore::run in progress stop between two instructions and
// throw Interrupted; runs that start afterwards are not affected. It is async-signal-safe (one
// atomic increment), so a SIGINT handler may call it. An interrupted run leaves its core
// usable: the instructions it did not reach never ran, its outputs are undefined.
#pragma once
#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace trnsim {

struct Interrupted : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Counts interrupt_runs() calls; a run compares it with the value it started with. One counter
// per process: with default visibility its static is a unique symbol, which the dynamic linker
// shares between every extension module linking the core (trnsim._core and trnsim._C), so that
// either module's SIGINT handler stops the runs of both.
[[gnu::visibility("default")]] inline std::atomic<uint64_t>& interrupt_epoch() noexcept {
    static std::atomic<uint64_t> epoch{0};
    return epoch;
}

// Release: whatever the caller wrote before (Python's "signal pending" flag) is visible to the
// run that sees the new epoch.
inline void interrupt_runs() noexcept { interrupt_epoch().fetch_add(1, std::memory_order_release); }

}  // namespace trnsim
