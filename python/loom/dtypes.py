"""Element types: Loom's dtype codes (include/loom/loom_dtype.h) and numpy's. bfloat16 comes
from ml_dtypes (installed with JAX) when it is there."""
import numpy as np

from . import _loom

try:
    import ml_dtypes as _ml
except ImportError:  # bfloat16 arrays then cannot be put or fetched
    _ml = None

_BY_CODE = {}
_BY_NUMPY = {}
NAMES = {}
for _code, _name, _mlir, _descr, _size in _loom.dtypes():
    NAMES[_code] = _name.lower()
    if _descr == "bfloat16":
        if _ml is None:
            continue
        _dt = np.dtype(_ml.bfloat16)
    else:
        _dt = np.dtype(_descr)
    _BY_CODE[_code] = _dt
    _BY_NUMPY[_dt] = _code


def to_numpy(code):
    """The numpy dtype of a Loom dtype code."""
    try:
        return _BY_CODE[code]
    except KeyError:
        raise TypeError(f"Loom dtype {NAMES.get(code, code)} has no numpy equivalent here"
                        + (" (install ml_dtypes for bfloat16)" if NAMES.get(code) == "bf16" else "")) from None


def from_numpy(dtype):
    """The Loom dtype code of a numpy dtype (native byte order)."""
    dt = np.dtype(dtype)
    if dt.byteorder == ">":
        dt = dt.newbyteorder("<")
    try:
        return _BY_NUMPY[dt]
    except KeyError:
        raise TypeError(f"Loom has no element type for numpy dtype {dt}") from None
