"""The end of a neuron process group: its inner gloo group's worker threads finish before the interpreter.

Each neuron process group moves values through an inner gloo group (trnsim.distributed.backend),
and gloo runs every transfer on a worker thread of that group. The worker drops its reference to
a finished transfer only after the rank waiting for it has returned, and with it the tensors it
moved. Those tensors have Python objects, and releasing a C++ reference to such a tensor takes
the GIL (c10::intrusive_ptr gives up the tensor's Python object when the count falls to one).
Once the interpreter is finalizing, Python ends a thread that takes the GIL with pthread_exit,
and that unwinding through the noexcept release calls std::terminate: a rank that had finished
its work died with SIGABRT, "terminate called without an active exception", when its last
collective's worker had not got the CPU before the main thread reached finalization.

So the gloo group is released when the neuron group shuts down (destroy_process_group), and by
an atexit handler (which runs before finalization) for groups still alive then. Releasing the
last reference joins gloo's worker threads; torch's binding lets go of the GIL meanwhile, so a
worker can still release its tensors.
"""

from __future__ import annotations

import atexit
import weakref

_groups: weakref.WeakSet = weakref.WeakSet()


class _ReleasedGloo:
    """Stands for the gloo group of a neuron group that was shut down: collectives raise."""

    def __init__(self, group_name: str):
        self._group_name = group_name

    def abort(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def __getattr__(self, name: str):
        from trnsim.distributed.backend import CollectiveError
        raise CollectiveError(f"neuron backend: process group '{self._group_name}' was shut down "
                              f"(destroy_process_group); {name} needs a live group")


def track(group) -> None:
    """Registers a NeuronCollectives, whose gloo group is released at exit if still alive."""
    _groups.add(group)


def release(group, blocking: bool = True) -> bool:
    """Releases group.gloo, joining its worker threads. Without 'blocking', a group whose collective
    is running on another thread is left alone (False): joining would wait for that collective."""
    if not group._lock.acquire(blocking=blocking):
        return False
    try:
        gloo, group.gloo = group.gloo, _ReleasedGloo(group.group_name)
        del gloo   # the last reference: ~ProcessGroupGloo joins the workers, without the GIL
    finally:
        group._lock.release()
    _groups.discard(group)
    return True


def gloo_worker_threads() -> int:
    """How many gloo worker threads this process has (Linux; 0 elsewhere)."""
    import os

    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().strip() == "pt_gloo_runloop"
        except OSError:
            pass
    return count


@atexit.register
def _release_at_exit() -> None:
    for group in list(_groups):
        release(group, blocking=False)
