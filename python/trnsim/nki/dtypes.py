"""NKI data types: numpy dtypes (ml_dtypes for bfloat16 and fp8), mapped to the ISA's storage types."""

from __future__ import annotations

import numpy as np

try:
    import ml_dtypes as _ml
except ImportError:  # bf16/fp8 kernels need ml_dtypes; fp32 ones run without it
    _ml = None

float32 = np.dtype(np.float32)
tfloat32 = float32   # TensorE's tf32 mode: stored as fp32
float16 = np.dtype(np.float16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)
bfloat16 = np.dtype(_ml.bfloat16) if _ml else None
float8_e4m3 = np.dtype(_ml.float8_e4m3fn) if _ml else None
float8_e5m2 = np.dtype(_ml.float8_e5m2) if _ml else None

# numpy dtype -> the ISA's dtype name (include/trnsim/dtype.h)
_ISA_NAMES = {float32: "f32", float16: "f16", int32: "i32", uint8: "u8", bool_: "boolean"}
if _ml:
    _ISA_NAMES.update({bfloat16: "bf16", float8_e4m3: "fp8_e4m3", float8_e5m2: "fp8_e5m2"})
_ALIASES = {"float32": float32, "fp32": float32, "tfloat32": float32, "float16": float16, "fp16": float16,
            "int32": int32, "uint8": uint8, "bool": bool_, "bfloat16": bfloat16, "bf16": bfloat16,
            "float8_e4m3": float8_e4m3, "float8_e4m3fn": float8_e4m3, "float8_e5m2": float8_e5m2}


def as_dtype(dt) -> np.dtype:
    """A numpy dtype from an NKI dtype, a numpy/ml_dtypes type, a torch dtype or a name."""
    if dt is None:
        raise TypeError("a dtype is required")
    if isinstance(dt, str) or type(dt).__module__.startswith("torch"):
        name = str(dt).replace("torch.", "")
        d = _ALIASES.get(name)
        if d is None:
            raise TypeError(f"unsupported dtype {dt!r}")
        return d
    d = np.dtype(dt)
    if d not in _ISA_NAMES:
        raise TypeError(f"unsupported dtype {d} (NKI tiles hold float32, bfloat16, float16, float8_e4m3, "
                        "float8_e5m2, int32, uint8 or bool)")
    return d


def isa_name(dt: np.dtype) -> str:
    return _ISA_NAMES[dt]


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def promote(*dts: np.dtype) -> np.dtype:
    """The result type of an elementwise op on tiles: fp32 if any input is fp32, else the first float."""
    if float32 in dts:
        return float32
    for d in dts:
        if is_float(d):
            return d
    return dts[0]
