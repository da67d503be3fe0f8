"""The ops as functions, named as in d2l and PyTorch.

Every function takes device Arrays or host data (NumPy arrays, PyTorch CPU tensors: uploaded once,
float32 / float16 / int32 as they are, any other dtype or a non-contiguous array an error naming
the argument), enqueues its kernels on the context's queue and returns new device Arrays without
waiting (out= writes into an existing Array instead). The context is ctx=, else the first device
Array's, else clattn.default_context(). Masks are given as in clattn.h's clattn_mask:
valid_lens (host ints, or a device int32 Array of (B) or (B, Q)), mask (0/1 or bool, 0 = blocked,
broadcastable), causal, fill (default d2l's -1e6; -inf as PyTorch's masked_fill), align
('top_left' as d2l and SDPA's is_causal, or 'bottom_right'), window ((left, right) keys around the
diagonal, None = unbounded).
"""
import ctypes

from . import _lib
from ._args import (Call, bool_arg, dropout_key, float32_arg, int_arg, out_dtype as _out_dtype,
                    probability_arg)
from ._lib import lib
from .array import Array


def _shape(call, x, name, lo, hi=4):
    a = call.array(x, name)
    if not lo <= a.ndim <= hi:
        raise ValueError(f"{name}: expected {lo} to {hi} dims, got shape {a.shape}")
    return a


def _t(a):
    return ctypes.byref(a.tensor)


def _p(a):
    return None if a is None else ctypes.pointer(a.tensor)


def _results(out, extras):
    return out if not extras else (out, *extras)


def masked_softmax(X, valid_lens=None, *, mask=None, causal=False, fill=None, align="top_left",
                   window=None, out=None, out_dtype=None, ctx=None):
    """d2l's masked_softmax: softmax over the last axis of X (..., K) after blocked positions
    get the fill. A row whose every key is blocked is uniform with a finite fill (d2l), NaN
    with -inf (PyTorch)."""
    c = Call(ctx, X, valid_lens, mask, out)
    X = _shape(c, X, "X", 1)
    m = c.mask(valid_lens, mask, causal, fill, align, window)
    out = c.output(out, "out", X.shape, _out_dtype(out_dtype, X.dtype))
    c.call(lib.clattn_masked_softmax, _t(X), ctypes.byref(m), _t(out))
    return out


def dot_product_attention(queries, keys, values, valid_lens=None, *, mask=None, causal=False,
                          fill=None, align="top_left", window=None, scale=None, bias=None,
                          alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, need_weights=False,
                          need_lse=False, out=None, out_dtype=None, ctx=None):
    """Scaled dot-product attention: dropout(masked_softmax(Q K^T scale)) V, scale default
    1/sqrt(d), for queries (.., Q, d), keys (.., K, d), values (.., K, dv), with 0 to 2 equal
    leading dims; 4-D keys and values may have fewer heads than queries (grouped-query). Returns
    out (.., Q, dv); with need_weights also the weights before dropout (.., Q, K) (the unfused
    path), with need_lse also each row's float32 log-sum-exp (.., Q): (out, weights, lse) in that
    order. dropout_p > 0 drops with clattn's Philox stream keyed by (seed, offset)."""
    need_weights = bool_arg(need_weights, "need_weights")
    need_lse = bool_arg(need_lse, "need_lse")
    c = Call(ctx, queries, keys, values, valid_lens, mask, out, bias, alibi_slopes)
    Q = _shape(c, queries, "queries", 2)
    K = _shape(c, keys, "keys", 2)
    V = _shape(c, values, "values", 2)
    m = c.mask(valid_lens, mask, causal, fill, align, window)
    dtype = _out_dtype(out_dtype, Q.dtype)
    extras = []
    if need_weights:
        extras.append(c.output(None, "weights", Q.shape[:-1] + K.shape[-2:-1], dtype))
    lse = c.output(None, "lse", Q.shape[:-1], "float32") if need_lse else None
    o = c.opts(m, dropout_p, seed, offset, scale, lse, bias, alibi_slopes)
    out = c.output(out, "out", Q.shape[:-1] + V.shape[-1:], dtype)
    c.call(lib.clattn_dot_product_attention, _t(Q), _t(K), _t(V), ctypes.byref(o), _t(out),
           _p(extras[0] if extras else None))
    if lse is not None:
        extras.append(lse)
    return _results(out, extras)


def dot_product_attention_backward(queries, keys, values, dout, valid_lens=None, *, out=None,
                                   lse=None, mask=None, causal=False, fill=None,
                                   align="top_left", window=None, scale=None, bias=None,
                                   alibi_slopes=None, dropout_p=0.0, seed=0, offset=0,
                                   need=("dq", "dk", "dv"), ctx=None):
    """The gradients (dQ, dK, dV) of dot_product_attention with the same arguments, from dout
    (.., Q, dv). Given the forward's out and lse (need_lse=True), the fused backward runs where
    the device has it. need: which of "dq", "dk", "dv" to compute (the others come back None).
    float32."""
    c = Call(ctx, queries, keys, values, dout, valid_lens, mask, out, lse, bias, alibi_slopes)
    Q = _shape(c, queries, "queries", 2)
    K = _shape(c, keys, "keys", 2)
    V = _shape(c, values, "values", 2)
    dO = _shape(c, dout, "dout", 2)
    bad = set(need) - {"dq", "dk", "dv"}
    if bad:
        raise ValueError(f"need: unknown gradient names {sorted(bad)} (dq, dk, dv)")
    m = c.mask(valid_lens, mask, causal, fill, align, window)
    o = c.opts(m, dropout_p, seed, offset, scale, None, bias, alibi_slopes)
    if lse is not None:
        o.lse = ctypes.pointer(c.array(lse, "lse", ("float32",)).tensor)
    fwd = None if out is None else c.array(out, "out")
    grads = [c.output(None, n, a.shape, "float32") if n in need else None
             for n, a in (("dq", Q), ("dk", K), ("dv", V))]
    g = _lib.AttentionGrads(*(_p(a) for a in grads), None)
    c.call(lib.clattn_dot_product_attention_backward, _t(Q), _t(K), _t(V), ctypes.byref(o),
           _p(fwd), _t(dO), ctypes.byref(g))
    return tuple(grads)


def additive_attention(queries, keys, values, W_q, W_k, w_v, valid_lens=None, *, mask=None,
                       causal=False, fill=None, dropout_p=0.0, seed=0, offset=0,
                       need_weights=False, out=None, out_dtype=None, ctx=None):
    """d2l's additive attention: scores w_v . tanh(W_q q + W_k k), queries (B, Q, q_size),
    keys (B, K, k_size), values (B, K, v), weights in PyTorch's layout: W_q (h, q_size),
    W_k (h, k_size), w_v (1, h). Returns out (B, Q, v), with need_weights (out, weights)."""
    need_weights = bool_arg(need_weights, "need_weights")
    c = Call(ctx, queries, keys, values, W_q, W_k, w_v, valid_lens, mask, out)
    q = _shape(c, queries, "queries", 3, 3)
    k = _shape(c, keys, "keys", 3, 3)
    v = _shape(c, values, "values", 3, 3)
    w = _lib.AdditiveWeights(c.tensor(W_q, "W_q"), c.tensor(W_k, "W_k"), c.tensor(w_v, "w_v"))
    m = c.mask(valid_lens, mask, causal, fill)
    o = c.opts(m, dropout_p, seed, offset)
    dtype = _out_dtype(out_dtype, q.dtype)
    weights = c.output(None, "weights", q.shape[:2] + k.shape[1:2], dtype) if need_weights \
        else None
    out = c.output(out, "out", q.shape[:2] + v.shape[2:], dtype)
    c.call(lib.clattn_additive_attention, _t(q), _t(k), _t(v), ctypes.byref(w), ctypes.byref(o),
           _t(out), _p(weights))
    return _results(out, [weights] if need_weights else [])


def mha_weights(c, num_heads, W_q, W_k, W_v, W_o, b_q=None, b_k=None, b_v=None, b_o=None,
                num_kv_heads=None):
    """The clattn_mha_weights of one call (W_o and b_o's shapes decide the output's)."""
    kv = 0 if num_kv_heads is None else int_arg(num_kv_heads, "num_kv_heads")
    w = _lib.MHAWeights(int_arg(num_heads, "num_heads"), *(c.tensor(a, n) for a, n in (
        (W_q, "W_q"), (W_k, "W_k"), (W_v, "W_v"), (W_o, "W_o"), (b_q, "b_q"), (b_k, "b_k"),
        (b_v, "b_v"), (b_o, "b_o"))), kv)
    c.keep.append(w)
    return w


def multihead_attention(queries, keys, values, num_heads, W_q, W_k, W_v, W_o, b_q=None, b_k=None,
                        b_v=None, b_o=None, valid_lens=None, *, num_kv_heads=None, mask=None,
                        causal=False, fill=None, align="top_left", window=None, bias=None,
                        alibi_slopes=None, dropout_p=0.0, seed=0, offset=0, need_weights=False,
                        need_saved=False, out=None, out_dtype=None, ctx=None):
    """d2l's multi-head attention (PyTorch weight layout: W_q (hidden, q_size), W_o (out_size,
    hidden), biases or None) over queries (B, Q, q_size), keys (B, K, k_size), values
    (B, K, v_size). Returns out (B, Q, out_size); with need_weights also the weights
    (B, H, Q, K), with need_saved also what multihead_attention_backward(saved=) reads instead of
    running the forward again (a float32 Array of clattn_mha_saved_numel elements), in that
    order."""
    need_weights = bool_arg(need_weights, "need_weights")
    need_saved = bool_arg(need_saved, "need_saved")
    c = Call(ctx, queries, keys, values, W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o, valid_lens,
             mask, out, bias, alibi_slopes)
    q = _shape(c, queries, "queries", 3, 3)
    k = _shape(c, keys, "keys", 3, 3)
    v = _shape(c, values, "values", 3, 3)
    W_o = c.array(W_o, "W_o")  # uploaded once: mha_weights takes the Array
    w = mha_weights(c, num_heads, W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o, num_kv_heads)
    if W_o.ndim != 2:
        raise ValueError(f"W_o: expected (out_size, hidden), got shape {W_o.shape}")
    m = c.mask(valid_lens, mask, causal, fill, align, window)
    saved = _mha_saved(c, q, k, w) if need_saved else None
    o = c.opts(m, dropout_p, seed, offset, None, None, bias, alibi_slopes, saved)
    dtype = _out_dtype(out_dtype, q.dtype)
    weights = c.output(None, "weights", (q.shape[0], int(num_heads), q.shape[1], k.shape[1]),
                       dtype) if need_weights and num_heads > 0 else None
    out = c.output(out, "out", q.shape[:2] + W_o.shape[:1], dtype)
    c.call(lib.clattn_multihead_attention, _t(q), _t(k), _t(v), ctypes.byref(w),
           ctypes.byref(o), _t(out), _p(weights))
    return _results(out, [a for a in (weights, saved) if a is not None])


def _mha_saved(c, q, k, w):
    n = lib.clattn_mha_saved_numel(_t(q), _t(k), ctypes.byref(w))
    if n == 0 and w.num_heads <= 0:
        raise ValueError(f"num_heads: expected a positive number of heads, got {w.num_heads}")
    if n == 0:
        raise ValueError("need_saved: the weights do not fit these inputs (num_heads, shapes)")
    return c.output(None, "saved", (n,), "float32")


def _grads(c, need, inputs):
    """Gradient Arrays (float32, each its input's shape) for the names in need that have an
    input; need None: all of them."""
    names = [n for n, a in inputs if a is not None]
    if need is not None:
        bad = set(need) - set(names)
        if bad:
            raise ValueError(f"need: no gradient named {sorted(bad)} here (have {names})")
        names = [n for n in names if n in need]
    shapes = dict(inputs)
    return {n: c.output(None, n, shapes[n].shape, "float32") for n in names}


def multihead_attention_backward(queries, keys, values, dout, num_heads, W_q, W_k, W_v, W_o,
                                 b_q=None, b_k=None, b_v=None, b_o=None, valid_lens=None, *,
                                 num_kv_heads=None, mask=None, causal=False, fill=None,
                                 align="top_left", window=None, bias=None, alibi_slopes=None,
                                 dropout_p=0.0, seed=0, offset=0, saved=None, need=None,
                                 ctx=None):
    """The gradients of multihead_attention with the same arguments from dout (B, Q, out_size):
    a dict of float32 Arrays named dqueries, dkeys, dvalues, dW_q, dW_k, dW_v, dW_o and, for the
    biases given, db_q, db_k, db_v, db_o (need: the names wanted; default all). saved: the
    forward's need_saved Array, read instead of computing the forward again. Self-attention (one
    tensor as queries, keys and values): its gradient is the sum of the three."""
    c = Call(ctx, queries, keys, values, dout, W_q, W_k, W_v, W_o, b_q, b_k, b_v, b_o,
             valid_lens, mask, saved, bias, alibi_slopes)
    q = _shape(c, queries, "queries", 3, 3)
    k = _shape(c, keys, "keys", 3, 3)
    v = _shape(c, values, "values", 3, 3)
    dO = _shape(c, dout, "dout", 3, 3)
    args = dict(W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    arrays = {n: None if a is None else c.array(a, n) for n, a in args.items()}
    w = mha_weights(c, num_heads, num_kv_heads=num_kv_heads, **arrays)
    m = c.mask(valid_lens, mask, causal, fill, align, window)
    sv = None if saved is None else c.array(saved, "saved", ("float32",))
    o = c.opts(m, dropout_p, seed, offset, None, None, bias, alibi_slopes, sv)
    grads = _grads(c, need, [("dqueries", q), ("dkeys", k), ("dvalues", v)] +
                   [("d" + n, a) for n, a in arrays.items()])
    g = _lib.MHAGrads(**{n: _p(a) for n, a in grads.items()})
    c.call(lib.clattn_multihead_attention_backward, _t(q), _t(k), _t(v), ctypes.byref(w),
           ctypes.byref(o), _t(dO), ctypes.byref(g))
    return grads


def additive_attention_backward(queries, keys, values, W_q, W_k, w_v, dout, valid_lens=None, *,
                                mask=None, causal=False, fill=None, dropout_p=0.0, seed=0,
                                offset=0, need=None, ctx=None):
    """The gradients of additive_attention with the same arguments from dout (B, Q, v): a dict
    of float32 Arrays named dqueries, dkeys, dvalues, dW_q, dW_k, dw_v (need: the names wanted;
    default all)."""
    c = Call(ctx, queries, keys, values, dout, W_q, W_k, w_v, valid_lens, mask)
    q = _shape(c, queries, "queries", 3, 3)
    k = _shape(c, keys, "keys", 3, 3)
    v = _shape(c, values, "values", 3, 3)
    dO = _shape(c, dout, "dout", 3, 3)
    wa = {n: c.array(a, n) for n, a in (("W_q", W_q), ("W_k", W_k), ("w_v", w_v))}
    w = _lib.AdditiveWeights(*(_p(a) for a in wa.values()))
    m = c.mask(valid_lens, mask, causal, fill)
    o = c.opts(m, dropout_p, seed, offset)
    grads = _grads(c, need, [("dqueries", q), ("dkeys", k), ("dvalues", v)] +
                   [("d" + n, a) for n, a in wa.items()])
    g = _lib.AdditiveGrads(**{n: _p(a) for n, a in grads.items()})
    c.call(lib.clattn_additive_attention_backward, _t(q), _t(k), _t(v), ctypes.byref(w),
           ctypes.byref(o), _t(dO), ctypes.byref(g))
    return grads


def masked_softmax_backward(out, dout, valid_lens=None, *, mask=None, causal=False,
                            align="top_left", window=None, dscores=None, ctx=None):
    """The gradient of masked_softmax's scores from its output out and dout (exactly 0 at
    blocked keys), with the forward's mask. float32."""
    c = Call(ctx, out, dout, valid_lens, mask, dscores)
    y = _shape(c, out, "out", 1)
    dy = _shape(c, dout, "dout", 1)
    m = c.mask(valid_lens, mask, causal, None, align, window)
    dscores = c.output(dscores, "dscores", y.shape, "float32")
    c.call(lib.clattn_masked_softmax_backward, _t(y), _t(dy), ctypes.byref(m), _t(dscores))
    return dscores


def decode_attention(queries, k_cache, v_cache, lens, k_new=None, v_new=None, *, advance=False,
                     causal=False, fill=None, window=None, scale=None, alibi_slopes=None,
                     need_lse=False, out=None, out_dtype=None, ctx=None):
    """KV-cache decoding: queries (B, Hq, Qn, d) over each sequence's cached keys; k_cache
    (B, Hkv, Kmax, d) and v_cache (B, Hkv, Kmax, dv) device Arrays, lens a device int32 Array
    (B). k_new and v_new (B, Hkv, Qn, .) are written into the caches at rows lens[b].. first (in
    place); advance=True then adds Qn to lens (in place). causal and window count from the
    bottom-right diagonal. Returns out (B, Hq, Qn, dv), with need_lse (out, lse)."""
    need_lse = bool_arg(need_lse, "need_lse")
    for a, n in ((k_cache, "k_cache"), (v_cache, "v_cache"), (lens, "lens")):
        if not isinstance(a, Array):
            raise TypeError(f"{n}: expected a device clattn.Array (the cache is updated in "
                            f"place), got {type(a).__name__}")
    c = Call(ctx, queries, k_cache)
    Q = _shape(c, queries, "queries", 4, 4)
    kv = _lib.KVCache(c.tensor(k_cache, "k_cache"), c.tensor(v_cache, "v_cache"),
                      c.tensor(lens, "lens", ("int32",)), c.tensor(k_new, "k_new"),
                      c.tensor(v_new, "v_new"), bool_arg(advance, "advance"))
    m = c.mask(None, None, causal, fill, "bottom_right", window)
    lse = c.output(None, "lse", Q.shape[:-1], "float32") if need_lse else None
    o = c.opts(m, 0.0, 0, 0, scale, lse, None, alibi_slopes)
    out = c.output(out, "out", Q.shape[:-1] + v_cache.shape[-1:], _out_dtype(out_dtype, Q.dtype))
    c.call(lib.clattn_decode_attention, _t(Q), ctypes.byref(kv), ctypes.byref(o), _t(out))
    return _results(out, [lse] if need_lse else [])


def matmul(A, B, trans_a=False, trans_b=False, *, alpha=1.0, beta=0.0, out=None,
           out_dtype=None, ctx=None):
    """alpha op(A) op(B) + beta out over the last two dims (batched; a 2-D operand is shared by
    every batch). beta needs out=."""
    c = Call(ctx, A, B, out)
    a = _shape(c, A, "A", 2)
    b = _shape(c, B, "B", 2)
    if beta and out is None:
        raise ValueError("beta: a nonzero beta reads out=, which was not given")
    lead = a.shape[:-2] if a.ndim >= b.ndim else b.shape[:-2]
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    out = c.output(out, "out", lead + (m, n), _out_dtype(out_dtype, a.dtype))
    c.call(lib.clattn_matmul, _t(a), bool_arg(trans_a, "trans_a"), _t(b),
           bool_arg(trans_b, "trans_b"),
           float32_arg(alpha, "alpha"), float32_arg(beta, "beta"), _t(out))
    return out


def linear(x, W, b=None, *, out=None, out_dtype=None, ctx=None):
    """x W^T + b, W (out_features, in_features) as torch.nn.Linear."""
    c = Call(ctx, x, W, out)
    xa = _shape(c, x, "x", 1)
    Wa = _shape(c, W, "W", 2, 2)
    out = c.output(out, "out", xa.shape[:-1] + Wa.shape[:1], _out_dtype(out_dtype, xa.dtype))
    c.call(lib.clattn_linear, _t(xa), _t(Wa), c.tensor(b, "b"), _t(out))
    return out


def dropout(x, p, *, seed=0, offset=0, training=True, out=None, ctx=None):
    """x * keep / (1 - p), keep drawn from clattn's Philox stream keyed by (seed, offset,
    element index); training=False copies."""
    c = Call(ctx, x, out)
    xa = c.array(x, "x")
    d = _lib.Dropout(probability_arg(p, "p"), bool_arg(training, "training"),
                     *dropout_key(seed, offset))
    out = c.output(out, "out", xa.shape, xa.dtype)
    c.call(lib.clattn_dropout, _t(xa), ctypes.byref(d), _t(out))
    return out


__all__ = ["masked_softmax", "masked_softmax_backward", "dot_product_attention",
           "dot_product_attention_backward", "additive_attention", "additive_attention_backward",
           "multihead_attention", "multihead_attention_backward", "decode_attention", "matmul",
           "linear", "dropout"]
