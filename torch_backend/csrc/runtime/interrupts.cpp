#include "runtime/interrupts.h"

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <csignal>
#include <mutex>

namespace trnsim::neuron {
namespace {

struct sigaction previous_sigint;

void on_sigint(int sig, siginfo_t* info, void* context) {
    interrupt_runs();
    const struct sigaction& prev = previous_sigint;
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
    } else if (prev.sa_handler == SIG_DFL) {
        std::signal(sig, SIG_DFL);   // the default action: end the process
        std::raise(sig);
    } else if (prev.sa_handler != SIG_IGN && prev.sa_handler) {
        prev.sa_handler(sig);
    }
}

}  // namespace

void install_interrupt_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction current {};
        if (sigaction(SIGINT, nullptr, &current) != 0) return;
        if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) return;   // ignored: keep it so
        struct sigaction ours {};
        ours.sa_sigaction = &on_sigint;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK | (current.sa_flags & SA_RESTART);
        sigemptyset(&ours.sa_mask);
        sigaction(SIGINT, &ours, &previous_sigint);
    });
}

void raise_interrupted(const Interrupted& e) {
    if (Py_IsInitialized()) {
        pybind11::gil_scoped_acquire gil;
        // On the main thread Python's SIGINT handler runs now and sets KeyboardInterrupt (the
        // signal is consumed, so it is not raised a second time); elsewhere we set it.
        if (PyErr_CheckSignals() == 0) PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
        python_error error;
        error.persist();
        throw error;
    }
    TORCH_CHECK(false, "trnsim: ", e.what());
}

}  // namespace trnsim::neuron
