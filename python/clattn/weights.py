"""Reading attention weights from PyTorch state_dicts (d2l's modules and torch.nn's) and NumPy."""
import numpy as np

from .array import to_numpy


def host_weight(value, name):
    """A float weight as a float32 C-contiguous NumPy array (the explicit conversion of loading:
    float64 and 16-bit data become float32)."""
    arr = to_numpy(value)
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"{name}: expected float weights, got {arr.dtype}")
    return np.ascontiguousarray(arr, np.float32)


def _take(sd, prefix, key, required=True):
    full = prefix + key
    if full in sd:
        return host_weight(sd[full], full)
    if required:
        raise KeyError(f"state_dict: missing {full!r} (has {sorted(sd)[:12]})")
    return None


def additive_from_state_dict(sd, prefix=""):
    """d2l's AdditiveAttention: W_q.weight (h, q_size), W_k.weight (h, k_size), w_v.weight
    (1, h)."""
    return {"W_q": _take(sd, prefix, "W_q.weight"), "W_k": _take(sd, prefix, "W_k.weight"),
            "w_v": _take(sd, prefix, "w_v.weight")}


def mha_from_state_dict(sd, prefix=""):
    """Multi-head weights from d2l's MultiHeadAttention (W_q.weight, ..., W_o.weight and, with
    bias=True, their .bias) or from torch.nn.MultiheadAttention (in_proj_weight or
    q/k/v_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias): a dict of W_q, W_k, W_v,
    W_o and b_q, b_k, b_v, b_o (None when absent)."""
    sd = dict(sd)
    if prefix + "W_q.weight" in sd:
        w = {n: _take(sd, prefix, f"{n}.weight") for n in ("W_q", "W_k", "W_v", "W_o")}
        for n in ("q", "k", "v", "o"):
            w[f"b_{n}"] = _take(sd, prefix, f"W_{n}.bias", required=False)
        return w
    for extra in ("bias_k", "bias_v"):
        if prefix + extra in sd:
            raise ValueError(f"state_dict: {prefix + extra} (add_bias_kv=True) appends a key "
                             "and value to every sequence; clattn has no such option")
    if prefix + "in_proj_weight" in sd:
        W = _take(sd, prefix, "in_proj_weight")
        if W.shape[0] % 3:
            raise ValueError(f"state_dict: in_proj_weight's first dim {W.shape[0]} is not 3 E")
        e = W.shape[0] // 3
        wq, wk, wv = W[:e], W[e:2 * e], W[2 * e:]
    elif prefix + "q_proj_weight" in sd:
        wq, wk, wv = (_take(sd, prefix, f"{n}_proj_weight") for n in "qkv")
        e = wq.shape[0]
    else:
        raise KeyError(f"state_dict: neither d2l's W_q.weight nor torch.nn.MultiheadAttention's "
                       f"in_proj_weight / q_proj_weight under prefix {prefix!r} "
                       f"(has {sorted(sd)[:12]})")
    b = _take(sd, prefix, "in_proj_bias", required=False)
    bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
    return {"W_q": np.ascontiguousarray(wq), "W_k": np.ascontiguousarray(wk),
            "W_v": np.ascontiguousarray(wv), "W_o": _take(sd, prefix, "out_proj.weight"),
            "b_q": bq if bq is None else np.ascontiguousarray(bq),
            "b_k": bk if bk is None else np.ascontiguousarray(bk),
            "b_v": bv if bv is None else np.ascontiguousarray(bv),
            "b_o": _take(sd, prefix, "out_proj.bias", required=False)}
