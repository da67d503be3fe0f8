"""Device arrays: a clattn_tensor view of a cl_mem buffer, with NumPy conversions."""
import ctypes
import math
import operator

import numpy as np

from . import _lib
from ._lib import lib

DTYPES = {"float32": _lib.FLOAT32, "int32": _lib.INT32, "float16": _lib.FLOAT16,
          "bfloat16": _lib.BFLOAT16}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
_ITEMSIZE = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}
_NUMPY = {"float32": np.dtype(np.float32), "int32": np.dtype(np.int32),
          "float16": np.dtype(np.float16)}


def _ml_bfloat16():
    """ml_dtypes' bfloat16 NumPy dtype (JAX's, TensorFlow's) when installed, else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def dtype_name(dtype, name="dtype"):
    """The clattn name of a dtype given as a string, a NumPy dtype or type (bfloat16: a string or
    ml_dtypes.bfloat16)."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d is not None and d.name in DTYPES:
        return d.name
    raise TypeError(f"{name}: {dtype!r} is not a clattn dtype "
                    f"(float32, float16, bfloat16, int32)")


def host_dtype_name(arr):
    """The clattn dtype of a NumPy array's data, or None (float64, int64, bool, a byte order
    other than the machine's, ...)."""
    if not arr.dtype.isnative:
        return None
    return arr.dtype.name if arr.dtype.name in DTYPES else None


def _shape(shape, name="shape"):
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name}: expected a tuple of ints, got {shape!r}") from None
    if not 1 <= len(shape) <= _lib.MAX_DIMS:
        raise ValueError(f"{name}: clattn tensors have 1 to {_lib.MAX_DIMS} dims, "
                         f"got {len(shape)} ({shape})")
    if any(d <= 0 for d in shape):
        raise ValueError(f"{name}: every dim must be positive, got {shape}")
    if any(d >= 2**63 for d in shape):  # ctypes would wrap it modulo 2**64
        raise ValueError(f"{name}: a dim is too large, got {shape}")
    return shape


class _Buffer:
    """Owns one cl_mem: released when the last Array over it (the owner or a view) is gone, so a
    view never outlives its memory, whatever release() was called."""

    def __init__(self, tensor):
        self.t = _lib.Tensor.from_buffer_copy(tensor)

    def __del__(self):
        try:
            lib.clattn_tensor_release(ctypes.byref(self.t))
        except Exception:  # interpreter shutdown
            pass


class Array:
    """A tensor in device memory: shape (1 to 4 dims), dtype (float32, float16, bfloat16,
    int32), row-major. Made by Context.array / empty / full, returned by the ops, or wrapping a
    pyopencl buffer (from_pyopencl). numpy() reads it back (waiting for the queue)."""

    def __init__(self, ctx, tensor, owner, base=None):
        self.context = ctx
        self._t = tensor
        # What keeps the buffer alive: its _Buffer (an owner's, or shared by a view of an Array),
        # or the pyopencl object a view wraps.
        self._base = (_Buffer(tensor) if owner else base._base if isinstance(base, Array)
                      else base)

    # ---- description ----
    @property
    def shape(self):
        return tuple(self._t.dims[i] for i in range(self._t.ndim))

    @property
    def dtype(self):
        return {v: k for k, v in DTYPES.items()}[self._t.dtype]

    @property
    def ndim(self):
        return self._t.ndim

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * _ITEMSIZE[self.dtype]

    @property
    def tensor(self):
        """The clattn_tensor view (a ctypes structure)."""
        if not self._t.buf:
            raise ValueError("clattn.Array: the array has been released")
        return self._t

    def __len__(self):
        return self.tensor.dims[0]

    def __iter__(self):
        """Views along the first dim, as a[0], a[1], ... (a 1-D Array's elements are not views:
        iterate over numpy())."""
        if self.tensor.ndim == 1:
            raise TypeError("iteration: the elements of a 1-D Array are not views; iterate over "
                            "its numpy()")
        return (self[i] for i in range(len(self)))

    def __reversed__(self):
        return reversed(list(iter(self)))

    def __repr__(self):
        if not self._t.buf:
            return "clattn.Array(released)"
        if not self.context._handle:
            return f"clattn.Array(shape={self.shape}, dtype={self.dtype}, context closed)"
        body = np.array2string(self.numpy(), separator=", ", prefix="clattn.Array(")
        return f"clattn.Array({body}, dtype={self.dtype})"

    # ---- host transfers ----
    def numpy(self):
        """A NumPy copy. float32, float16 and int32 keep their dtype; bfloat16 comes back as
        ml_dtypes.bfloat16 when that package is installed, else as float32 (exact: bfloat16 is
        float32's top half)."""
        if self.dtype == "bfloat16":
            raw = np.empty(self.shape, np.uint16)
            self.context.call(lib.clattn_tensor_read_blocking, ctypes.byref(self.tensor),
                              raw.ctypes.data)
            bf = _ml_bfloat16()
            if bf is not None:
                return raw.view(bf)
            return (raw.astype(np.uint32) << 16).view(np.float32)
        out = np.empty(self.shape, _NUMPY[self.dtype])
        self.context.call(lib.clattn_tensor_read_blocking, ctypes.byref(self.tensor),
                          out.ctypes.data)
        return out

    def __array__(self, dtype=None, copy=None):
        if copy is False:  # NumPy 2's protocol: no copy asked for, none possible
            raise ValueError("copy: a clattn.Array's data is on the device; reading it makes a "
                             "copy (copy=False cannot be met)")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def write(self, data):
        """Copies host data of this array's exact shape and dtype into it (blocking)."""
        arr = np.asarray(data)
        if arr.shape != self.shape:
            raise ValueError(f"data: shape {arr.shape} differs from the array's {self.shape}")
        want = _NUMPY.get(self.dtype)
        if self.dtype == "bfloat16":
            if arr.dtype.name != "bfloat16":
                raise TypeError(f"data: expected bfloat16 data (ml_dtypes), got {arr.dtype}")
        elif arr.dtype != want:
            raise TypeError(f"data: expected {self.dtype} data, got {arr.dtype}")
        if not arr.flags.c_contiguous:
            raise ValueError("data: the array is not C-contiguous")
        self.context.call(lib.clattn_tensor_write_blocking, ctypes.byref(self.tensor),
                          arr.ctypes.data)

    # ---- device-side ----
    def fill(self, value):
        """Sets every element to value (rounded to a 16-bit dtype; enqueued)."""
        if self.dtype not in FLOAT_DTYPES:
            raise TypeError(f"fill: the array is {self.dtype}; fill takes float arrays")
        self.context.call(lib.clattn_tensor_fill, ctypes.byref(self.tensor), float(value))
        return self

    def astype(self, dtype):
        """A new array converted on the device (clattn_convert: any two float dtypes, rounding
        to nearest even)."""
        dtype = dtype_name(dtype)
        self.tensor  # noqa: B018 (a released Array fails here, by that name)
        if dtype not in FLOAT_DTYPES or self.dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype: astype converts between float dtypes "
                            f"({', '.join(FLOAT_DTYPES)}), got {self.dtype} to {dtype}")
        out = empty(self.context, self.shape, dtype)
        self.context.call(lib.clattn_convert, ctypes.byref(self.tensor), ctypes.byref(out.tensor))
        return out

    def copy(self):
        return self.astype(self.dtype) if self.dtype in FLOAT_DTYPES else \
            from_host(self.context, self.numpy(), "int32")

    # ---- views (same buffer) ----
    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = list(shape)
        if shape.count(-1) == 1:
            rest = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = self.size // rest if rest else 0
        shape = _shape(shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"shape: cannot reshape {self.shape} ({self.size} elements) "
                             f"to {shape}")
        return self._view(self._t.offset, shape)

    def __getitem__(self, key):
        """Views along the first dim: a[i] (one fewer dim) or a[i:j] (contiguous slices)."""
        rows = self.tensor.dims[0]
        row_size = self.size // rows
        if isinstance(key, slice):
            start, stop, step = key.indices(rows)
            if step != 1 or stop <= start:
                raise IndexError(f"index: only non-empty slices with step 1 view an Array, "
                                 f"got {key}")
            return self._view(self._t.offset + start * row_size,
                              (stop - start,) + self.shape[1:])
        i = operator.index(key)
        if i < 0:
            i += rows
        if not 0 <= i < rows:
            raise IndexError(f"index: {key} is out of range for dim 0 of size {rows}")
        if self.ndim == 1:
            raise IndexError("index: an element of a 1-D Array is not a view; use numpy()")
        return self._view(self._t.offset + i * row_size, self.shape[1:])

    def _view(self, offset, shape):
        dims = (ctypes.c_size_t * _lib.MAX_DIMS)(*shape)
        t = lib.clattn_view(self.tensor.buf, self._t.dtype, offset, len(shape), dims)
        return Array(self.context, t, owner=False, base=self)

    # ---- pyopencl interop ----
    @classmethod
    def from_pyopencl(cls, ctx, data, shape=None, dtype=None, offset=0):
        """A view of a pyopencl.array.Array or pyopencl.Buffer, without a copy. For a Buffer,
        give shape and dtype (and offset, in elements). ctx: a Context over the same cl_context
        (Context.from_pyopencl)."""
        buf = getattr(data, "base_data", data)
        if hasattr(data, "base_data"):  # pyopencl.array.Array
            if not data.flags.c_contiguous:
                raise ValueError("data: the pyopencl array is not C-contiguous")
            dtype = _pyopencl_dtype(data.dtype, dtype)
            item = _ITEMSIZE[dtype]
            if data.offset % item:
                raise ValueError(f"data: byte offset {data.offset} is not a multiple of {item}")
            shape, offset = data.shape, data.offset // item
        elif shape is None or dtype is None:
            raise TypeError("shape, dtype: required when data is a pyopencl.Buffer")
        dtype, shape = dtype_name(dtype), _shape(shape)
        try:
            offset = operator.index(offset)
        except TypeError:
            raise TypeError(f"offset: expected an integer, got {offset!r}") from None
        if offset < 0:
            raise ValueError(f"offset: {offset} is negative")
        if not hasattr(buf, "int_ptr") or not hasattr(buf, "size"):
            raise TypeError(f"data: expected a pyopencl Buffer or Array, got {type(data).__name__}")
        need = (offset + int(np.prod(shape))) * _ITEMSIZE[dtype]
        if need > buf.size:
            raise ValueError(f"shape, offset: the view needs {need} bytes, the buffer has "
                             f"{buf.size}")
        dims = (ctypes.c_size_t * _lib.MAX_DIMS)(*shape)
        t = lib.clattn_view(buf.int_ptr, DTYPES[dtype], offset, len(shape), dims)
        return cls(ctx, t, owner=False, base=data)

    def to_pyopencl(self, queue):
        """A pyopencl.array.Array over the same buffer (no copy). bfloat16 arrays come back as
        uint16 (pyopencl has no bfloat16)."""
        import pyopencl as cl
        import pyopencl.array as cla
        buf = cl.Buffer.from_int_ptr(self.tensor.buf, retain=True)
        npdt = _NUMPY.get(self.dtype, np.dtype(np.uint16))
        return cla.Array(queue, self.shape, npdt, data=buf,
                         offset=self._t.offset * _ITEMSIZE[self.dtype])

    # ---- lifetime ----
    def release(self):
        """Drops this Array's hold on its buffer: the memory is freed once no Array over it (an
        owner or a view) holds it, and OpenCL keeps it until enqueued work using it has run.
        Under the context's lock, so never during another thread's call on this Array; a call
        another thread has begun with it and that waits for the lock fails instead ("tensor has
        no buffer"): its tensor is cleared in place, the one that call passes, so that it never
        reaches freed memory."""
        with self.context._lock:
            ctypes.memset(ctypes.addressof(self._t), 0, ctypes.sizeof(self._t))
            self._base = None


def _pyopencl_dtype(npdt, dtype):
    """The clattn dtype of a pyopencl array of NumPy dtype npdt; dtype, when given, must agree,
    except that "bfloat16" names the uint16 arrays to_pyopencl makes of bfloat16 Arrays."""
    if dtype is not None:
        name = dtype_name(dtype)
        if name == "bfloat16" and np.dtype(npdt) == np.uint16:
            return name
        if name != dtype_name(npdt, "data"):
            raise TypeError(f"dtype: {name} differs from the pyopencl array's {np.dtype(npdt)}")
        return name
    return dtype_name(npdt, "data")


def empty(ctx, shape, dtype="float32"):
    return _create(ctx, _shape(shape), dtype_name(dtype))


def _create(ctx, shape, dtype, host=None):
    """A new Array of a checked shape and dtype name; host: C-contiguous data of that size and
    dtype, copied as the buffer is made (CL_MEM_COPY_HOST_PTR), so nothing waits for the work
    already on the queue, as a write would."""
    dims = (ctypes.c_size_t * _lib.MAX_DIMS)(*shape)
    t = _lib.Tensor()
    ctx.call(lib.clattn_tensor_create, DTYPES[dtype], len(shape), dims,
             None if host is None else host.ctypes.data, ctypes.byref(t))
    return Array(ctx, t, owner=True)


def to_numpy(data):
    """NumPy view or copy of host data: NumPy arrays as they are, PyTorch tensors through
    .detach().cpu().numpy(), anything else through np.asarray."""
    if isinstance(data, np.ndarray):
        return data
    if hasattr(data, "detach") and hasattr(data, "numpy"):
        return data.detach().cpu().numpy()
    return np.asarray(data)


def _float32_round_to_odd(arr):
    """arr (float64, integers, ...) as float32 rounded to odd: toward zero, then the last bit set
    where that was inexact. With its 13 bits more than float16 (16 more than bfloat16), a later
    round to nearest even of it gives the nearest even of arr itself, where rounding arr to
    nearest float32 first could round twice (1 + 2^-11 + 2^-30 to float16 1.0, not 1 + 2^-10)."""
    x = np.asarray(arr, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        wide = f.astype(np.float64)
        inexact = np.isfinite(x) & (wide != x)
        f = np.where(inexact & (np.abs(wide) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
    bits = np.asarray(f, np.float32).view(np.uint32)  # f is float32 already: no copy
    return np.ascontiguousarray(np.where(inexact, bits | np.uint32(1), bits).view(np.float32))


def from_host(ctx, data, dtype=None):
    """Context.array: an Array holding a copy of data (see there)."""
    if isinstance(data, Array):
        raise TypeError("data: already a clattn.Array (use astype or copy)")
    arr = to_numpy(data)
    src = host_dtype_name(arr)
    if dtype is None:
        if src is not None:
            dtype = src
        elif arr.dtype.kind == "f":
            dtype = "float32"
        elif arr.dtype.kind in "iub":
            dtype = "int32"
        else:
            raise TypeError(f"data: dtype {arr.dtype} has no clattn dtype")
    dtype = dtype_name(dtype)
    if src is None and arr.dtype.kind not in "fiub":  # complex parts or strings: no silent cast
        raise TypeError(f"data: {arr.dtype} data cannot become {dtype}")
    if dtype == "int32":
        if arr.dtype.kind not in "iub":
            raise TypeError(f"data: {arr.dtype} data cannot become int32")
        if arr.size and arr.dtype.kind != "b" and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise ValueError("data: values outside int32's range")
        host = np.ascontiguousarray(arr, np.int32)
    elif dtype == src or dtype == "float32":  # one rounding, numpy's to nearest even
        host = np.ascontiguousarray(arr, _NUMPY.get(dtype, arr.dtype))
    else:
        # Other data to a 16-bit dtype: float32 on the host, then clattn_convert, so the rounding
        # is the library's own; wider data goes to float32 rounded to odd, so that the 16-bit
        # rounding is still the only one.
        narrow = arr.dtype.kind == "f" and arr.dtype.itemsize <= 4
        staged = from_host(ctx, np.ascontiguousarray(arr, np.float32) if narrow
                           else _float32_round_to_odd(arr), "float32")
        out = staged.astype(dtype)
        staged.release()
        return out
    return _create(ctx, _shape(host.shape if host.ndim else (1,), "data"), dtype, host)
