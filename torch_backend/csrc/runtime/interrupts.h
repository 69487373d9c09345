// Ctrl-C during a simulation.
//
// A kernel launch can simulate for seconds with the GIL released, so Python's own SIGINT
// handling (a flag the interpreter checks between bytecodes) would only act once it returns.
// install_interrupt_handler() (when the devices are first initialised) puts a SIGINT handler
// in front of the process's: it calls trnsim::interrupt_runs(), which stops the run in
// progress between two instructions, and then the handler it replaced (Python's). The
// interrupted launch throws trnsim::Interrupted, which raise_interrupted() turns into Python's
// KeyboardInterrupt. The device stays usable. A handler that Python code installs later with
// signal.signal(SIGINT, ...) replaces ours: launches then finish before the signal is seen.
#pragma once
#include "trnsim/interrupt.h"

namespace trnsim::neuron {

void install_interrupt_handler();

// Raises KeyboardInterrupt in Python (as a torch python_error), or a c10::Error where no
// interpreter is running.
[[noreturn]] void raise_interrupted(const Interrupted& e);

}  // namespace trnsim::neuron
