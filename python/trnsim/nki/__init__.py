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

from trnsim.nki import isa, language  # noqa: F401
from trnsim.nki.errors import NkiCapacityError, NkiError, NkiIndexError, NkiUnsupportedError  # noqa: F401
from trnsim.nki.profile import KernelRun  # noqa: F401
from trnsim.nki.runtime import Kernel, benchmark, jit, simulate, simulate_kernel, spec  # noqa: F401
