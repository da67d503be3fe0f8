"""Contexts (a device, its queue and compiled kernels) and the device listing."""
import ctypes
import re
import threading
from collections import namedtuple

from . import _lib
from ._lib import lib
from .errors import raise_status

Device = namedtuple("Device", "spec name platform vendor type selected")
Device.__doc__ = """One OpenCL device: spec ("P:D", usable as Context(device=...) and
CLATTN_DEVICE), its name, platform and vendor names, type ("CPU", "GPU", ...), and whether the
spec given to devices() (default: CLATTN_DEVICE, else the first GPU, accelerator, CPU) selects
it."""


def _enc(s, name):
    """s as the C string the library reads; a NUL inside would cut it short there."""
    if s is None:
        return None
    s = str(s)
    if "\0" in s:
        raise ValueError(f"{name}: contains a NUL character")
    return s.encode()


def devices(spec=None):
    """Every OpenCL device clattn sees, in clattn-info's order, as Device tuples."""
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        lib.clattn_list_devices(_enc(spec, "spec"), buf, size)
        text = buf.value.decode(errors="replace")
        if len(text) < size - 1:
            break
        size *= 4
    found = []
    for line in text.splitlines():
        m = re.match(r"([* ]) (\d+:\d+) (.*) \[(.*)\] \((.*), ([^,]*)\)$", line)
        if m:
            found.append(Device(m.group(2), m.group(3), m.group(4), m.group(5), m.group(6),
                                m.group(1) == "*"))
    return found


def _params(tuning, kernel_dir, cache_dir, sync, tune_file, device=None):
    if sync not in (None, True, False):
        raise TypeError(f"sync: expected None, True or False, got {sync!r}")
    return _lib.Params(device=_enc(device, "device"), tuning=_enc(tuning, "tuning"),
                       kernel_dir=_enc(kernel_dir, "kernel_dir"),
                       cache_dir=_enc(cache_dir, "cache_dir"),
                       sync={None: 0, True: 1, False: -1}[sync],
                       tune_file=_enc(tune_file, "tune_file"))


class Context:
    """A clattn context: one OpenCL device and its in-order queue.

    Context(device=None) picks the device as the C library does: `device` (a spec as
    CLATTN_DEVICE takes: "cpu", "gpu", "P:D", a name such as "pocl"), else the environment's
    CLATTN_DEVICE, else the first GPU, accelerator, CPU. tuning, kernel_dir, cache_dir, sync and
    tune_file are clattn_params' fields (each winning over its environment variable). Ops
    enqueue work and return; Array.numpy() and finish() wait for it. Use from one thread at a
    time (a lock serialises calls from several).
    """

    def __init__(self, device=None, *, tuning=None, kernel_dir=None, cache_dir=None, sync=None,
                 tune_file=None):
        self._handle = ctypes.c_void_p()
        self._keep = ()
        self._lock = threading.RLock()
        params = _params(tuning, kernel_dir, cache_dir, sync, tune_file, device)
        st = lib.clattn_context_create(ctypes.byref(self._handle), ctypes.byref(params))
        if st:
            raise_status(st, lib.clattn_last_error(None).decode(errors="replace"))

    @classmethod
    def wrap(cls, cl_context, cl_device, cl_queue, *, keep=(), tuning=None, kernel_dir=None,
             cache_dir=None, sync=None, tune_file=None):
        """Borrows an application's cl_context, cl_device_id and in-order cl_command_queue,
        given as integer handles (retained by clattn, released when the context closes). keep:
        Python objects to hold alive as long as the context."""
        self = cls.__new__(cls)
        self._handle = ctypes.c_void_p()
        self._keep = tuple(keep)
        self._lock = threading.RLock()
        params = _params(tuning, kernel_dir, cache_dir, sync, tune_file)
        st = lib.clattn_context_wrap(ctypes.byref(self._handle), cl_context, cl_device,
                                     cl_queue, ctypes.byref(params))
        if st:
            raise_status(st, lib.clattn_last_error(None).decode(errors="replace"))
        return self

    @classmethod
    def from_pyopencl(cls, queue, **kwargs):
        """A context over a pyopencl CommandQueue (its context and device), without copies:
        Arrays then share buffers with pyopencl (Array.from_pyopencl, Array.to_pyopencl)."""
        return cls.wrap(queue.context.int_ptr, queue.device.int_ptr, queue.int_ptr,
                        keep=(queue,), **kwargs)

    def to_pyopencl(self):
        """(pyopencl.Context, pyopencl.CommandQueue) over this context's own objects."""
        import pyopencl as cl
        self._check_open()
        ctx = cl.Context.from_int_ptr(lib.clattn_context_cl(self._handle), retain=True)
        queue = cl.CommandQueue.from_int_ptr(lib.clattn_context_queue(self._handle),
                                             retain=True)
        return ctx, queue

    def _check_open(self):
        if not self._handle:
            raise ValueError("clattn.Context: the context is closed")

    def call(self, fn, *args):
        """Calls a status-returning C function with the handle first; raises on failure with
        clattn_last_error's text, read under the same lock."""
        with self._lock:
            self._check_open()
            st = fn(self._handle, *args)
            if st:
                raise_status(st, lib.clattn_last_error(self._handle).decode(errors="replace"))

    @property
    def handle(self):
        self._check_open()
        return self._handle

    @property
    def cl_context(self):
        """The cl_context handle, as an integer."""
        self._check_open()
        return lib.clattn_context_cl(self._handle)

    @property
    def description(self):
        self._check_open()
        return lib.clattn_context_description(self._handle).decode(errors="replace")

    @property
    def tune_note(self):
        """What came of the tune file (clattn-tune's): its entries in use, or why none are."""
        self._check_open()
        return lib.clattn_context_tune_note(self._handle).decode(errors="replace")

    def tuning(self, op):
        """The kernel variant and parameters op runs with here ("cpu:QR=5:..."), op one of
        matmul, softmax, attention, decode, backward or half, optionally with a bucket:
        "@d64" / "@d128" / "@d256" (attention, decode, backward) or "@small" (matmul)."""
        buf = ctypes.create_string_buffer(1024)
        self.call(lib.clattn_context_tuning, _enc(op, "op"), buf, len(buf))
        return buf.value.decode()

    def finish(self):
        """Waits until everything enqueued on the context's queue has run."""
        self.call(lib.clattn_finish)

    def close(self):
        """Destroys the context (waiting for work on a queue it created). Idempotent."""
        with self._lock:
            if self._handle:
                lib.clattn_context_destroy(ctypes.byref(self._handle))
            self._keep = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the module may be gone already
            pass

    def __repr__(self):
        state = self.description if self._handle else "closed"
        return f"clattn.Context({state})"

    # Arrays (defined in array.py, imported lazily to keep the modules one-way).
    def array(self, data, dtype=None):
        """A device Array holding a copy of data (a NumPy array, a PyTorch CPU tensor, nested
        lists). dtype None keeps float32, float16, int32 and bfloat16 data as they are, makes
        float64 data float32 and integer or bool data int32; a 16-bit dtype given for float data
        rounds on the device (to nearest even, as clattn_convert)."""
        from .array import from_host
        return from_host(self, data, dtype)

    def empty(self, shape, dtype="float32"):
        """An uninitialised device Array."""
        from .array import empty
        return empty(self, shape, dtype)

    def full(self, shape, value, dtype="float32"):
        """A float Array of one value (rounded to dtype), filled on the device."""
        a = self.empty(shape, dtype)
        a.fill(value)
        return a

    def zeros(self, shape, dtype="float32"):
        return self.full(shape, 0.0, dtype)


_default = None
_default_lock = threading.Lock()


def default_context():
    """The context the functions use when given neither ctx= nor a device Array: created at
    the first call with Context() (CLATTN_DEVICE or the default choice), then reused."""
    global _default
    with _default_lock:
        if _default is None or not _default._handle:
            _default = Context()
        return _default


def set_default_context(ctx):
    """Makes ctx (a Context, or None to create one again when next needed) the default."""
    global _default
    if ctx is not None and not isinstance(ctx, Context):
        raise TypeError(f"ctx: expected a clattn.Context, got {type(ctx).__name__}")
    with _default_lock:
        _default = ctx
