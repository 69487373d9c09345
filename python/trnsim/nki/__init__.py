"""trnsim.nki: NKI (Neuron Kernel Interface) kernels on the simulated NeuronCore.

    from trnsim import nki
    import trnsim.nki.language as nl
    import trnsim.nki.isa as nisa

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))
        return out

    y = kernel(x)                              # numpy in, numpy out
    run = nki.simulate(kernel, x, chip="trn2")  # outputs, simulated time, profile
    print(run.summary())

See docs/nki.md.
"""

from trnsim.nki import compiler, isa, language, typing  # noqa: F401
from trnsim.nki.errors import NkiCapacityError, NkiError, NkiIndexError, NkiUnsupportedError  # noqa: F401
from trnsim.nki.profile import KernelRun  # noqa: F401
from trnsim.nki.runtime import Kernel, benchmark, jit, simulate, simulate_kernel, spec  # noqa: F401

from trnsim.nki.torch_op import torch_op  # noqa: E402,F401

baremetal = jit   # @nki.baremetal: called on numpy arrays it runs the kernel, as @nki.jit does here


def alias_modules() -> None:
    """Makes `import neuronxcc.nki`, `import neuronxcc.nki.language as nl`, `import nki.isa as nisa`
    (both generations' module names) resolve to trnsim.nki, so that published kernels run unmodified.
    Names that a real Neuron install already provides are left alone."""
    import importlib.util
    import sys
    import types

    import trnsim.nki as this

    for root in ("neuronxcc", "nki"):
        try:
            if root not in sys.modules and importlib.util.find_spec(root) is not None:
                continue
        except (ImportError, ValueError):
            pass
        base = f"{root}.nki" if root == "neuronxcc" else root
        if root == "neuronxcc":
            pkg = sys.modules.setdefault("neuronxcc", types.ModuleType("neuronxcc"))
            pkg.nki = this
        sys.modules[base] = this
        sys.modules[f"{base}.language"] = language
        sys.modules[f"{base}.isa"] = isa
        sys.modules[f"{base}.typing"] = typing
        sys.modules[f"{base}.compiler"] = compiler
