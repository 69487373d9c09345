// Process exit while autograd's device threads are still finishing.
//
// PyTorch runs the backward work of a neuron tensor on an autograd worker thread of the
// neuron device. When backward() returns to the caller, that thread still drops its last
// references to the graph task: Python objects among them (custom Function nodes,
// checkpoint hooks, an exception a backward hook raised) take the GIL to be released. Once
// the interpreter is finalizing, a thread taking the GIL is ended by pthread_exit, whose
// unwinding through those noexcept destructors calls std::terminate ("terminate called
// without an active exception", SIGABRT). quiesce_autograd_threads(), run by an atexit
// handler (python/trnsim/neuron), waits until every neuron worker thread has finished what it
// was doing, before finalization starts.
#pragma once

namespace trnsim::neuron {

// Runs a tiny backward on every created neuron device, from C++ (no Python objects): each
// device's worker thread takes it only after finishing its previous task. The caller must
// not hold the GIL (the workers may need it to finish).
void quiesce_autograd_threads();

}  // namespace trnsim::neuron
