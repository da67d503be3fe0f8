"""clattn: portable OpenCL attention (d2l's attention chapters) from Python.

    import clattn
    clattn.devices()                          # every OpenCL device; CLATTN_DEVICE picks one
    X = clattn.masked_softmax(np.random.rand(2, 2, 4).astype("f"), [2, 3])
    X.numpy()

Arrays live on the device (clattn.Array); the functions take them or host data (NumPy arrays,
PyTorch CPU tensors) and return new Arrays without waiting for the device. Errors raise
clattn.Error subclasses carrying the C library's message.
"""
from ._lib import lib as _cdll
from .array import Array
from .context import Context, Device, default_context, devices, set_default_context
from .errors import (BuildFailed, DeviceNotFound, Error, FileError, InvalidArgument,
                     InvalidTensor, NoPlatform, OpenCLError, OutOfMemory, ShapeMismatch,
                     Unsupported)
from .functional import (additive_attention, additive_attention_backward, decode_attention,
                         dot_product_attention, dot_product_attention_backward, dropout, linear,
                         masked_softmax, masked_softmax_backward, matmul, multihead_attention,
                         multihead_attention_backward)
from .modules import AdditiveAttention, DotProductAttention, MultiHeadAttention
from .plot import show_heatmaps

__version__ = _cdll.clattn_version().decode()


def array(data, dtype=None, ctx=None):
    """An Array on ctx (default: clattn.default_context()); see Context.array."""
    return (ctx or default_context()).array(data, dtype)


__all__ = ["Array", "Context", "Device", "default_context", "devices", "set_default_context",
           "array", "Error", "BuildFailed", "DeviceNotFound", "FileError", "InvalidArgument",
           "InvalidTensor", "NoPlatform", "OpenCLError", "OutOfMemory", "ShapeMismatch",
           "Unsupported", "additive_attention", "decode_attention", "dot_product_attention",
           "dot_product_attention_backward", "dropout", "linear", "masked_softmax", "matmul",
           "multihead_attention", "additive_attention_backward", "masked_softmax_backward",
           "multihead_attention_backward", "AdditiveAttention", "DotProductAttention",
           "MultiHeadAttention", "show_heatmaps"]
