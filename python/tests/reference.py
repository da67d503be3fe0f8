"""Double-precision NumPy references of the ops, written from d2l's and the tutorial's definitions
(not from clattn's code), and the tolerance checks the tests share."""
import numpy as np


def blocked(shape, valid_lens=None, mask=None, causal=False, align="top_left", window=None):
    """Boolean (.., Q, K): True where a key is blocked."""
    Q, K = shape[-2], shape[-1]
    blk = np.zeros(shape, bool)
    if valid_lens is not None:
        lens = np.asarray(valid_lens)
        keys = np.arange(K)
        if lens.ndim == 1:  # per leading batch index, repeated over the rest
            lens = lens.reshape((-1,) + (1,) * (len(shape) - 1))
            blk |= keys >= lens
        else:  # (B, Q): per row
            lens = lens.reshape((lens.shape[0],) + (1,) * (len(shape) - 3) + (Q, 1))
            blk |= keys >= lens
    if mask is not None:
        blk |= np.broadcast_to(np.asarray(mask) == 0, shape)
    i = np.arange(Q)[:, None]
    j = np.arange(K)[None, :]
    diag = i + (K - Q if align == "bottom_right" else 0)
    if causal:
        blk |= j > diag
    if window is not None:
        left, right = window
        if left is not None:
            blk |= j < diag - left
        if right is not None and not causal:
            blk |= j > diag + right
    return blk


def masked_softmax(X, blk, fill=-1e6):
    X = np.where(blk, fill, np.asarray(X, np.float64))
    m = X.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(X - m)
        return e / e.sum(axis=-1, keepdims=True)


def attention(Q, K, V, blk, scale=None, fill=-1e6):
    """out, weights, lse of softmax(mask(Q K^T scale)) V; 4-D K, V with fewer heads are shared
    by groups of query heads (enable_gqa)."""
    Q, K, V = (np.asarray(a, np.float64) for a in (Q, K, V))
    if Q.ndim == 4 and K.shape[1] != Q.shape[1]:
        g = Q.shape[1] // K.shape[1]
        K, V = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)
    scale = 1 / np.sqrt(Q.shape[-1]) if scale is None else scale
    S = np.where(blk, fill, Q @ np.swapaxes(K, -1, -2) * scale)
    m = S.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):  # rows of -inf only: NaN here, left out by the tests
        lse = (m + np.log(np.exp(S - m).sum(axis=-1, keepdims=True)))[..., 0]
    W = masked_softmax(S, np.zeros_like(blk), fill)
    return W @ V, W, lse


def out_scale(W, V):
    """sum_k w |v|: the magnitude an attention output's rounding scales with."""
    V = np.asarray(V, np.float64)
    if V.ndim == 4 and W.shape[1] != V.shape[1]:
        V = np.repeat(V, W.shape[1] // V.shape[1], axis=1)
    return np.abs(W) @ np.abs(V)


def attention_backward(Q, K, V, dout, blk, scale=None, fill=-1e6):
    """dQ, dK, dV of attention(): dP = dout V^T, dS = P (dP - rowsum(dP P)) scale."""
    Q, K, V, dout = (np.asarray(a, np.float64) for a in (Q, K, V, dout))
    scale = 1 / np.sqrt(Q.shape[-1]) if scale is None else scale
    _, P, _ = attention(Q, K, V, blk, scale, fill)
    dV = np.swapaxes(P, -1, -2) @ dout
    dP = dout @ np.swapaxes(V, -1, -2)
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))
    dS = np.where(blk, 0.0, dS) * scale
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, dV


def attention_backward_mag(Q, K, V, dout, blk, P, scale=None):
    """The magnitudes the gradients' float32 rounding scales with: attention_backward with every
    sum over terms' absolute values (|dP| = |dout| |V|^T, dS = P (|dP| + rowsum(|dP| P))), for
    the weights P of the signed inputs."""
    Q, K, V, dout = (np.abs(np.asarray(a, np.float64)) for a in (Q, K, V, dout))
    scale = 1 / np.sqrt(Q.shape[-1]) if scale is None else abs(scale)
    dP = dout @ np.swapaxes(V, -1, -2)
    dS = np.where(blk, 0.0, P * (dP + (dP * P).sum(axis=-1, keepdims=True))) * scale
    return dS @ K, np.swapaxes(dS, -1, -2) @ Q, np.swapaxes(P, -1, -2) @ dout


def multihead_backward(q, k, v, num_heads, w, blk_fn, dout, fill=-1e6):
    """The gradients of multihead()'s inputs, weights and biases (dqueries, ..., dW_q, ...,
    db_q, ...) for dout, and for each the magnitude scale of its float32 rounding."""
    H = num_heads
    dh = w["W_q"].shape[0] // H
    Hkv = w["W_k"].shape[0] // dh
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]

    def heads(x, h):
        return x.reshape(B, x.shape[1], h, dh).transpose(0, 2, 1, 3)

    def concat(x):
        return x.transpose(0, 2, 1, 3).reshape(B, x.shape[2], -1)

    def ungroup(x):  # (B, H, T, dh) gradients of shared K/V heads: sum each group
        return x.reshape(B, Hkv, H // Hkv, x.shape[2], dh).sum(axis=2)

    blk = blk_fn((B, H, Tq, Tk))
    g = H // Hkv
    Qs = heads(linear(q, w["W_q"], w.get("b_q")), H)
    Ks = np.repeat(heads(linear(k, w["W_k"], w.get("b_k")), Hkv), g, axis=1)
    _, P, _ = attention(Qs, Ks, Ks, blk, fill=fill)  # the weights, for both chains

    def chain(absolute):
        f = np.abs if absolute else (lambda a: np.asarray(a, np.float64))
        W = {n: None if a is None else f(a) for n, a in w.items()}
        x = {"queries": f(q), "keys": f(k), "values": f(v)}
        proj = {n: linear(x[n], W["W_" + n[0]], W.get("b_" + n[0]))
                for n in ("queries", "keys", "values")}
        Qh, Kh, Vh = (heads(proj[n], h) for n, h in (("queries", H), ("keys", Hkv),
                                                     ("values", Hkv)))
        Kr, Vr = np.repeat(Kh, g, axis=1), np.repeat(Vh, g, axis=1)
        o = P @ Vr
        d = f(dout)
        dC = d @ W["W_o"]
        if absolute:
            dQh, dKh, dVh = attention_backward_mag(Qh, Kr, Vr, heads(dC, H), blk, P)
        else:
            dQh, dKh, dVh = attention_backward(Qh, Kr, Vr, heads(dC, H), blk, fill=fill)
        dp = {"queries": concat(dQh), "keys": concat(ungroup(dKh)),
              "values": concat(ungroup(dVh))}
        grads = {"dW_o": np.einsum("bto,bth->oh", d, concat(o))}
        if w.get("b_o") is not None:
            grads["db_o"] = d.sum(axis=(0, 1))
        for n, c in (("queries", "q"), ("keys", "k"), ("values", "v")):
            grads["d" + n] = dp[n] @ W["W_" + c]
            grads["dW_" + c] = np.einsum("bth,bti->hi", dp[n], x[n])
            if w.get("b_" + c) is not None:
                grads["db_" + c] = dp[n].sum(axis=(0, 1))
        return grads
    return chain(False), chain(True)


def additive(q, k, v, W_q, W_k, w_v, blk, fill=-1e6):
    """d2l's AdditiveAttention: scores w_v . tanh(W_q q + W_k k)."""
    qp = np.asarray(q, np.float64) @ np.asarray(W_q, np.float64).T
    kp = np.asarray(k, np.float64) @ np.asarray(W_k, np.float64).T
    feat = np.tanh(qp[:, :, None, :] + kp[:, None, :, :])
    scores = feat @ np.asarray(w_v, np.float64).reshape(-1)
    W = masked_softmax(scores, blk, fill)
    return W @ np.asarray(v, np.float64), W


def linear(x, W, b=None):
    y = np.asarray(x, np.float64) @ np.asarray(W, np.float64).T
    return y if b is None else y + np.asarray(b, np.float64)


def multihead(q, k, v, num_heads, w, blk_fn, fill=-1e6):
    """d2l's MultiHeadAttention with weights w (W_q ... W_o, b_q ... b_o or None); blk_fn(shape)
    gives the (B, H, Q, K) blocked keys. Returns out, the (B, H, Q, K) weights and the output's
    magnitude scale."""
    def heads(x, h):
        B, T, E = x.shape
        return x.reshape(B, T, h, E // h).transpose(0, 2, 1, 3)
    H = num_heads
    Hkv = w["W_k"].shape[0] // (w["W_q"].shape[0] // H)
    Qh = heads(linear(q, w["W_q"], w.get("b_q")), H)
    Kh = heads(linear(k, w["W_k"], w.get("b_k")), Hkv)
    Vh = heads(linear(v, w["W_v"], w.get("b_v")), Hkv)
    blk = blk_fn((Qh.shape[0], H, Qh.shape[2], Kh.shape[2]))
    o, W, _ = attention(Qh, Kh, Vh, blk, fill=fill)
    B, _, T, dh = o.shape

    def concat(x):
        return x.transpose(0, 2, 1, 3).reshape(B, T, H * dh)

    def absw(n):
        return None if w.get(n) is None else np.abs(w[n])
    # The output's rounding scale: the same chain over magnitudes (|v| |W_v|, sum w |v|, |W_o|).
    vmag = heads(linear(np.abs(v), absw("W_v"), absw("b_v")), Hkv)
    mag = linear(concat(out_scale(W, vmag)), absw("W_o"), absw("b_o"))
    return linear(concat(o), w["W_o"], w.get("b_o")), W, mag


def assert_scaled(got, ref, scale, tol, what):
    """|got - ref| <= tol * scale everywhere; non-finite references matched exactly."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    fin = np.isfinite(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), \
        f"{what}: NaN at {np.argwhere(np.isnan(got) != np.isnan(ref))[:3].tolist()}"
    assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]), f"{what}: infinities differ"
    err = np.abs(got - ref)[fin]
    lim = (tol * np.broadcast_to(scale, ref.shape))[fin]
    bad = err > lim
    assert not bad.any(), (f"{what}: {bad.sum()} elements off, worst {err.max():.3g} "
                           f"(limit {lim[np.argmax(err - lim)]:.3g})")


def assert_close(got, ref, rtol, atol, what):
    ref = np.asarray(ref, np.float64)
    assert_scaled(got, ref, np.abs(ref) * rtol + atol, 1.0, what)
