"""ctypes mirror of include/clattn.h: the structs, the functions' prototypes, the loaded library.

Each struct below copies its C declaration field for field; check_layout() compares them with the
sizes and offsets the C compiler gave (the probe in _layout.c, built into the same module), so
the two cannot drift apart unnoticed.
"""
import ctypes
import os
from ctypes import POINTER, c_char_p, c_float, c_int, c_size_t, c_ulonglong, c_ushort, c_void_p

MAX_DIMS = 4

FLOAT32, INT32, FLOAT16, BFLOAT16 = 0, 1, 2, 3
ALIGN_TOP_LEFT, ALIGN_BOTTOM_RIGHT = 0, 1


class Tensor(ctypes.Structure):
    _fields_ = [("buf", c_void_p), ("offset", c_size_t), ("ndim", c_int),
                ("dims", c_size_t * MAX_DIMS), ("dtype", c_int)]


TensorP = POINTER(Tensor)


class Params(ctypes.Structure):
    _fields_ = [("device", c_char_p), ("tuning", c_char_p), ("kernel_dir", c_char_p),
                ("cache_dir", c_char_p), ("sync", c_int), ("tune_file", c_char_p)]


class Mask(ctypes.Structure):
    _fields_ = [("valid_lens", TensorP), ("valid_lens_host", POINTER(c_int)),
                ("lens_ndim", c_int), ("lens_dims", c_size_t * 2), ("mask", TensorP),
                ("causal", c_int), ("fill", c_float), ("align", c_int), ("window", c_int),
                ("window_left", c_int), ("window_right", c_int)]


class Dropout(ctypes.Structure):
    _fields_ = [("p", c_float), ("training", c_int), ("seed", c_ulonglong),
                ("offset", c_ulonglong)]


class AttentionOpts(ctypes.Structure):
    _fields_ = [("mask", Mask), ("dropout", Dropout), ("scale", c_float), ("lse", TensorP),
                ("bias", TensorP), ("alibi_slopes", TensorP), ("saved", TensorP)]


class KVCache(ctypes.Structure):
    _fields_ = [("k_cache", TensorP), ("v_cache", TensorP), ("lens", TensorP),
                ("k_new", TensorP), ("v_new", TensorP), ("advance", c_int)]


class AdditiveWeights(ctypes.Structure):
    _fields_ = [("W_q", TensorP), ("W_k", TensorP), ("w_v", TensorP)]


class MHAWeights(ctypes.Structure):
    _fields_ = [("num_heads", c_int), ("W_q", TensorP), ("W_k", TensorP), ("W_v", TensorP),
                ("W_o", TensorP), ("b_q", TensorP), ("b_k", TensorP), ("b_v", TensorP),
                ("b_o", TensorP), ("num_kv_heads", c_int)]


class AttentionGrads(ctypes.Structure):
    _fields_ = [("dQ", TensorP), ("dK", TensorP), ("dV", TensorP), ("dbias", TensorP)]


class MHAGrads(ctypes.Structure):
    _fields_ = [(n, TensorP) for n in ("dqueries", "dkeys", "dvalues", "dW_q", "dW_k", "dW_v",
                                       "dW_o", "db_q", "db_k", "db_v", "db_o", "dbias")]


class AdditiveGrads(ctypes.Structure):
    _fields_ = [(n, TensorP) for n in ("dqueries", "dkeys", "dvalues", "dW_q", "dW_k", "dw_v")]


# C name -> ctypes mirror, for the layout check.
STRUCTS = {
    "clattn_tensor": Tensor, "clattn_params": Params, "clattn_mask": Mask,
    "clattn_dropout_params": Dropout, "clattn_attention_opts": AttentionOpts,
    "clattn_kv_cache": KVCache, "clattn_additive_weights": AdditiveWeights,
    "clattn_mha_weights": MHAWeights, "clattn_attention_grads": AttentionGrads,
    "clattn_mha_grads": MHAGrads, "clattn_additive_grads": AdditiveGrads,
}

_T = TensorP
_P = c_void_p
# name -> (restype, argtypes); every status-returning function returns c_int.
_PROTOTYPES = {
    "clattn_version": (c_char_p, []),
    "clattn_status_string": (c_char_p, [c_int]),
    "clattn_last_error": (c_char_p, [_P]),
    "clattn_context_create": (c_int, [POINTER(c_void_p), POINTER(Params)]),
    "clattn_context_wrap": (c_int, [POINTER(c_void_p), _P, _P, _P, POINTER(Params)]),
    "clattn_context_destroy": (None, [POINTER(c_void_p)]),
    "clattn_context_cl": (c_void_p, [_P]),
    "clattn_context_device": (c_void_p, [_P]),
    "clattn_context_queue": (c_void_p, [_P]),
    "clattn_context_description": (c_char_p, [_P]),
    "clattn_finish": (c_int, [_P]),
    "clattn_context_tune_path": (c_char_p, [_P]),
    "clattn_context_tune_note": (c_char_p, [_P]),
    "clattn_context_tuning": (c_int, [_P, c_char_p, c_char_p, c_size_t]),
    "clattn_list_devices": (c_int, [c_char_p, c_char_p, c_size_t]),
    "clattn_view": (Tensor, [_P, c_int, c_size_t, c_int, POINTER(c_size_t)]),
    "clattn_tensor_create": (c_int, [_P, c_int, c_int, POINTER(c_size_t), _P, _T]),
    "clattn_tensor_release": (None, [_T]),
    "clattn_tensor_write_blocking": (c_int, [_P, _T, _P]),
    "clattn_tensor_read_blocking": (c_int, [_P, _T, _P]),
    "clattn_tensor_fill": (c_int, [_P, _T, c_float]),
    "clattn_float_to_bfloat16": (c_ushort, [c_float]),
    "clattn_convert": (c_int, [_P, _T, _T]),
    "clattn_matmul": (c_int, [_P, _T, c_int, _T, c_int, c_float, c_float, _T]),
    "clattn_linear": (c_int, [_P, _T, _T, _T, _T]),
    "clattn_masked_softmax": (c_int, [_P, _T, POINTER(Mask), _T]),
    "clattn_dropout": (c_int, [_P, _T, POINTER(Dropout), _T]),
    "clattn_dot_product_attention": (c_int, [_P, _T, _T, _T, POINTER(AttentionOpts), _T, _T]),
    "clattn_decode_attention": (c_int, [_P, _T, POINTER(KVCache), POINTER(AttentionOpts), _T]),
    "clattn_additive_attention": (c_int, [_P, _T, _T, _T, POINTER(AdditiveWeights),
                                          POINTER(AttentionOpts), _T, _T]),
    "clattn_multihead_attention": (c_int, [_P, _T, _T, _T, POINTER(MHAWeights),
                                           POINTER(AttentionOpts), _T, _T]),
    "clattn_mha_saved_numel": (c_size_t, [_T, _T, POINTER(MHAWeights)]),
    "clattn_dot_product_attention_backward": (c_int, [_P, _T, _T, _T, POINTER(AttentionOpts),
                                                      _T, _T, POINTER(AttentionGrads)]),
    "clattn_multihead_attention_backward": (c_int, [_P, _T, _T, _T, POINTER(MHAWeights),
                                                    POINTER(AttentionOpts), _T,
                                                    POINTER(MHAGrads)]),
    "clattn_masked_softmax_backward": (c_int, [_P, _T, _T, POINTER(Mask), _T]),
    "clattn_additive_attention_backward": (c_int, [_P, _T, _T, _T, POINTER(AdditiveWeights),
                                                   POINTER(AttentionOpts), _T,
                                                   POINTER(AdditiveGrads)]),
    "clattn_py_layout": (c_int, [c_int, POINTER(c_char_p), POINTER(c_char_p),
                                 POINTER(c_size_t)]),
}


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    names = [n for n in os.listdir(here) if n.startswith("_libclattn.")]
    if not names:
        raise ImportError(f"clattn: the compiled module _libclattn is missing from {here} "
                          "(install the package with pip install . from the repository)")
    lib = ctypes.CDLL(os.path.join(here, names[0]))
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def check_layout(lib):
    """Raises ImportError where a ctypes mirror differs from the C compiler's layout."""
    typ, field, value = c_char_p(), c_char_p(), c_size_t()
    i, seen = 0, set()
    while lib.clattn_py_layout(i, ctypes.byref(typ), ctypes.byref(field), ctypes.byref(value)):
        i += 1
        tname = typ.value.decode()
        mirror = STRUCTS[tname]
        if field.value is None:
            got, what = ctypes.sizeof(mirror), f"sizeof({tname})"
        else:
            fname = field.value.decode()
            got, what = getattr(mirror, fname).offset, f"offsetof({tname}, {fname})"
            seen.add((tname, fname))
        if got != value.value:
            raise ImportError(f"clattn: the Python mirror of {what} is {got}, "
                              f"the C library's {value.value}: python/clattn/_lib.py is stale")
    for tname, mirror in STRUCTS.items():
        for fname, _ in mirror._fields_:
            if (tname, fname) not in seen:
                raise ImportError(f"clattn: {tname}.{fname} is not in the layout probe")


lib = _load()
check_layout(lib)
