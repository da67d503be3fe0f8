"""Turning one op's Python arguments into the C call's: the context, device tensors, the mask and
the attention options. Host data is uploaded here, checked strictly (dtype and layout, named by
the argument), never converted behind the caller's back except where the docs say so."""
import ctypes
import math
import operator

import numpy as np

from . import _lib
from .array import FLOAT_DTYPES, Array, dtype_name, empty, from_host, host_dtype_name, to_numpy
from .context import Context, default_context

_ALIGN = {"top_left": _lib.ALIGN_TOP_LEFT, "bottom_right": _lib.ALIGN_BOTTOM_RIGHT}


def _ptr(t):
    return None if t is None else ctypes.pointer(t)


def int_arg(value, name, lo=-2**31, hi=2**31 - 1):
    """value as an int in [lo, hi] (default int32's range), else an error naming the argument:
    ctypes would wrap it, or truncate a float, without a word."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {value!r}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name}: {v} is outside [{lo}, {hi}]")
    return v


def bool_arg(value, name):
    """value as 0 or 1 from a bool (or NumPy's) or the integers 0 and 1, else an error naming
    the argument: bool() would take causal="no" for True."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer))
                                                and value in (0, 1)):
        return int(bool(value))
    raise TypeError(f"{name}: expected True or False, got {value!r}")


def float32_arg(value, name):
    """value as a float that float32 holds as itself or as an infinity it already was, else an
    error naming the argument: ctypes' c_float would make 1e40 an infinity without a word."""
    try:
        if isinstance(value, (str, bytes)):  # float() would parse "0.5"
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a number, got {value!r}") from None
    if math.isfinite(v) and abs(v) > _FLT_MAX:
        raise ValueError(f"{name}: {value} is outside float32's range (+-3.4028235e38)")
    return v


_FLT_MAX = float(np.finfo(np.float32).max)


def probability_arg(value, name):
    """value as a float in [0, 1], else an error naming the argument."""
    p = float32_arg(value, name)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1], got {value}")
    return p


def dropout_key(seed, offset):
    """The Philox stream's seed and offset, each a uint64."""
    return int_arg(seed, "seed", 0, 2**64 - 1), int_arg(offset, "offset", 0, 2**64 - 1)


def out_dtype(dtype, default):
    """An op's out_dtype (a float dtype), default when None."""
    if dtype is None:
        return default
    name = dtype_name(dtype, "out_dtype")
    if name not in FLOAT_DTYPES:
        raise TypeError(f"out_dtype: expected one of {', '.join(FLOAT_DTYPES)}, got {name}")
    return name


class Call:
    """One op call's arguments. Objects the C call reads (uploaded arrays, ctypes structs, host
    lengths) are kept in self.keep until the call object is dropped, after the C call returns."""

    def __init__(self, ctx, *args):
        if ctx is not None and not isinstance(ctx, Context):
            raise TypeError(f"ctx: expected a clattn.Context, got {type(ctx).__name__}")
        if ctx is None:
            ctx = next((a.context for a in args if isinstance(a, Array)), None)
        self.ctx = ctx if ctx is not None else default_context()
        self.keep = []

    def call(self, fn, *args):
        self.ctx.call(fn, *args)

    def array(self, x, name, dtypes=FLOAT_DTYPES):
        """x as a device Array of this context: an Array as it is, host data uploaded when its
        dtype is one of dtypes and it is C-contiguous."""
        if isinstance(x, Array):
            if not x._t.buf:
                raise ValueError(f"{name}: the array has been released")
            if x.context is not self.ctx and x.context.cl_context != self.ctx.cl_context:
                raise ValueError(f"{name}: the array belongs to another OpenCL context "
                                 f"({x.context.description})")
            if x.dtype not in dtypes:
                raise TypeError(f"{name}: dtype {x.dtype} is not accepted here "
                                f"({', '.join(dtypes)})")
            return x
        if x is None:
            raise TypeError(f"{name}: required, got None")
        arr = to_numpy(x)
        src = host_dtype_name(arr)
        if src not in dtypes:
            hint = " (convert with .astype(numpy.float32))" if "float32" in dtypes else ""
            raise TypeError(f"{name}: dtype {arr.dtype} is not accepted here "
                            f"({', '.join(dtypes)}){hint}")
        if not arr.flags.c_contiguous:
            raise ValueError(f"{name}: the array is not C-contiguous "
                             "(numpy.ascontiguousarray makes a copy that is)")
        if not 1 <= arr.ndim <= _lib.MAX_DIMS:
            raise ValueError(f"{name}: expected 1 to {_lib.MAX_DIMS} dims, got shape {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"{name}: an empty array (shape {arr.shape}); every dim of a "
                             "clattn tensor is positive")
        a = from_host(self.ctx, arr, src)
        self.keep.append(a)
        return a

    def tensor(self, x, name, dtypes=FLOAT_DTYPES):
        """A pointer to x's clattn_tensor (None for None)."""
        if x is None:
            return None
        return _ptr(self.array(x, name, dtypes).tensor)

    def output(self, out, name, shape, dtype):
        """The caller's out Array, or a new one of shape and dtype."""
        if out is None:
            return empty(self.ctx, shape, dtype_name(dtype, name + "_dtype"))
        if not isinstance(out, Array):
            raise TypeError(f"{name}: expected a clattn.Array (outputs live on the device), "
                            f"got {type(out).__name__}")
        return self.array(out, name, FLOAT_DTYPES)

    def mask(self, valid_lens=None, mask=None, causal=False, fill=None, align="top_left",
             window=None):
        m = _lib.Mask()
        if valid_lens is not None:
            if isinstance(valid_lens, Array):
                m.valid_lens = _ptr(self.array(valid_lens, "valid_lens", ("int32",)).tensor)
            else:
                self._host_lens(m, valid_lens)
        if mask is not None:
            if not isinstance(mask, Array):
                arr = to_numpy(mask)
                if arr.dtype.kind not in "biu":
                    raise TypeError(f"mask: expected a bool or integer 0/1 mask, got {arr.dtype}")
                # bool masks: True = attend; other integers compared with 0 here, as a cast
                # to int32 would wrap 2**32 to 0
                mask = np.ascontiguousarray(arr if arr.dtype == np.int32 else arr != 0,
                                            np.int32)
            m.mask = _ptr(self.array(mask, "mask", ("int32",)).tensor)
        m.causal = bool_arg(causal, "causal")
        if fill is not None:
            m.fill = float32_arg(fill, "fill")
            if m.fill == 0.0:
                raise ValueError("fill: 0 means the default fill in clattn; give a nonzero value")
        if not isinstance(align, str) or align not in _ALIGN:
            raise ValueError(f"align: expected 'top_left' or 'bottom_right', got {align!r}")
        m.align = _ALIGN[align]
        if window is not None:
            try:
                left, right = window
            except (TypeError, ValueError):
                raise TypeError(f"window: expected (left, right), None meaning unbounded, "
                                f"got {window!r}") from None
            m.window = 1
            # None is unbounded; C's -1 for it is not taken here, nor any negative bound
            m.window_left = -1 if left is None else int_arg(left, "window", 0)
            m.window_right = -1 if right is None else int_arg(right, "window", 0)
        self.keep.append(m)
        return m

    def _host_lens(self, m, valid_lens):
        arr = to_numpy(valid_lens)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"valid_lens: expected integer lengths, got {arr.dtype}")
        if arr.ndim not in (1, 2):
            raise ValueError(f"valid_lens: expected 1-D (B) or 2-D (B, Q) lengths, "
                             f"got shape {arr.shape}")
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise ValueError("valid_lens: values outside int32's range")
        host = (ctypes.c_int * max(arr.size, 1))(*np.asarray(arr, np.int64).ravel().tolist())
        self.keep.append(host)
        m.valid_lens_host = ctypes.cast(host, ctypes.POINTER(ctypes.c_int))
        m.lens_ndim = arr.ndim
        for i, d in enumerate(arr.shape):
            m.lens_dims[i] = d

    def opts(self, mask=None, dropout_p=0.0, seed=0, offset=0, scale=None, lse=None,
             bias=None, alibi_slopes=None, saved=None):
        o = _lib.AttentionOpts()
        if mask is not None:
            o.mask = mask
        p = probability_arg(dropout_p, "dropout_p")
        if p:
            o.dropout = _lib.Dropout(p, 1, *dropout_key(seed, offset))
        if scale is not None:
            o.scale = float32_arg(scale, "scale")
            if o.scale == 0.0 or not math.isfinite(o.scale):
                raise ValueError(f"scale: expected a finite nonzero scale, got {scale}")
        o.lse = _ptr(None if lse is None else lse.tensor)
        o.bias = self.tensor(bias, "bias", ("float32",))
        o.alibi_slopes = self.tensor(alibi_slopes, "alibi_slopes", ("float32",))
        o.saved = _ptr(None if saved is None else saved.tensor)
        self.keep.append(o)
        return o
