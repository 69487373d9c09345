#include "runtime/interrupts.h"

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include <csignal>
#include <mutex>
#include <string>

namespace trnsim::neuron {
namespace {

struct sigaction previous_sigint;

// The replaced handler runs first: Python's marks the signal pending, and only then may a run
// see the new epoch. In the other order a run on another thread than the handler's could stop,
// find no pending signal, raise its own KeyboardInterrupt, and Python would raise a second one
// for the same Ctrl-C at its next bytecode (inside the user's except block).
void on_sigint(int sig, siginfo_t* info, void* context) {
    const struct sigaction& prev = previous_sigint;
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
    } else if (prev.sa_handler == SIG_DFL) {
        std::signal(sig, SIG_DFL);   // the default action: end the process
        std::raise(sig);
    } else if (prev.sa_handler != SIG_IGN && prev.sa_handler) {
        prev.sa_handler(sig);
    }
    interrupt_runs();
}

// Adds 'note' to the exception being raised (PEP 678: shown under its traceback).
void add_note_to_raised(const char* note) {
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value) {
        PyObject* added = PyObject_CallMethod(value, "add_note", "s", note);
        if (added) Py_DECREF(added);
        else PyErr_Clear();
    }
    PyErr_Restore(type, value, traceback);
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
        // signal is consumed, so it is not raised a second time); elsewhere we set it. Either
        // way the exception says which simulation stopped, and where.
        if (PyErr_CheckSignals() == 0) PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
        else add_note_to_raised((std::string("trnsim: ") + e.what()).c_str());
        python_error error;
        error.persist();
        throw error;
    }
    TORCH_CHECK(false, "trnsim: ", e.what());
}

}  // namespace trnsim::neuron
