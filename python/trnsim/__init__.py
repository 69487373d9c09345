"""trnsim: a simulator of a Trainium-class accelerator."""

import os
from pathlib import Path


def installed_path(*parts: str) -> Path | None:
    """A file or directory installed with the package (trnsim/<parts>), if there is one. An
    editable install spreads the package over several directories, so each is looked in."""
    for package_dir in __path__:
        candidate = Path(package_dir).joinpath(*parts)
        if candidate.exists():
            return candidate
    return None


# The C++ core finds chip presets through $TRNSIM_CONFIG_DIR; default it to the packaged ones.
if "TRNSIM_CONFIG_DIR" not in os.environ:
    _chip_config_dir = installed_path("configs", "chips")
    if _chip_config_dir is not None:
        os.environ["TRNSIM_CONFIG_DIR"] = str(_chip_config_dir)

from trnsim.instance import apply_environment as _apply_instance  # noqa: E402

_apply_instance()   # TRNSIM_INSTANCE: the chip and how many of them (trnsim/instance.py)

from trnsim import _core  # noqa: E402  (needs TRNSIM_CONFIG_DIR set first)

__version__ = _core.version()

from trnsim.profiler import profile  # noqa: E402,F401  (trnsim.profile(): the profiler)
from trnsim.timing_only_mode import is_timing_only, timing_only  # noqa: E402,F401  (timing-only mode)


def _autoload() -> None:
    """Entry point of PyTorch's device-backend autoloading (group "torch.backends").

    Registers the "neuron" device when torch is imported. TRNSIM_AUTOLOAD=0 turns
    this off; `import trnsim.neuron` then registers it explicitly.
    """
    if os.environ.get("TRNSIM_AUTOLOAD", "1") == "0":
        return
    import trnsim.neuron  # noqa: F401  (registration happens on import)
