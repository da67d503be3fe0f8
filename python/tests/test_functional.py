"""The functions against the double-precision references: awkward shapes, every mask kind, 16-bit
operands, outputs poisoned before each run."""
import numpy as np
import pytest
from conftest import poisoned

import clattn
import reference as ref

SM_RTOL, SM_ATOL = 1e-5, 1e-9  # float32 softmax: a few ulp of each weight
W_RTOL, W_ATOL = 1e-4, 1e-7    # attention weights: score rounding at |score| ~ 1e3 dominates
OUT_TOL = 1e-4                 # outputs, relative to sum_k w |v|
GRAD_TOL = 1e-4                # gradients, relative to their terms' magnitudes
U16 = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # unit roundoff of the 16-bit dtypes


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def test_masked_softmax_d2l_examples(ctx):
    # d2l 11.3.1's two calls: 1-D lengths [2, 3] and 2-D lengths [[1, 3], [2, 4]].
    X = np.random.default_rng(0).random((2, 2, 4)).astype(np.float32)
    for lens in ([2, 3], [[1, 3], [2, 4]]):
        got = clattn.masked_softmax(X, lens, out=poisoned(ctx, X.shape)).numpy()
        want = ref.masked_softmax(X, ref.blocked(X.shape, np.array(lens)))
        ref.assert_close(got, want, SM_RTOL, SM_ATOL, f"d2l lens {lens}")
        assert (got[want == 0] == 0).all()


@pytest.mark.parametrize("shape,lens,kw", [
    ((1, 1, 1), None, {}),
    ((3, 5, 17), [0, 17, 9], {}),                       # valid_len 0 and K
    ((2, 3, 15), [[0, 1, 15], [14, 3, 2]], {}),          # per-row lengths
    ((2, 3, 5, 16), [4, 1], {"causal": True}),           # 4-D, lengths repeat over the heads
    ((2, 7, 31), None, {"causal": True, "align": "bottom_right"}),
    ((2, 9, 33), None, {"window": (2, 1)}),
    ((2, 4, 6), [0, 3], {"fill": float("-inf")}),        # a NaN row, as PyTorch's
    ((2, 4, 6), [0, 3], {"fill": -1e9}),                 # the tutorial's fill
])
def test_masked_softmax(ctx, rng, shape, lens, kw):
    X = f32(rng, *shape, scale=1e3)  # large logits
    got = clattn.masked_softmax(X, lens, out=poisoned(ctx, shape), **kw).numpy()
    blk = ref.blocked(shape, None if lens is None else np.array(lens), None,
                      kw.get("causal", False), kw.get("align", "top_left"), kw.get("window"))
    want = ref.masked_softmax(X, blk, kw.get("fill", -1e6))
    ref.assert_close(got, want, SM_RTOL, SM_ATOL, f"softmax {shape} {lens} {kw}")


def test_masked_softmax_mask_and_device_lens(ctx, rng):
    X = f32(rng, 3, 4, 13)
    mask = rng.random((1, 4, 13)) < 0.7  # bool, broadcast over the batch
    lens = ctx.array(np.array([13, 0, 5], np.int32))
    got = clattn.masked_softmax(X, lens, mask=mask, out=poisoned(ctx, X.shape)).numpy()
    want = ref.masked_softmax(X, ref.blocked(X.shape, [13, 0, 5], mask))
    ref.assert_close(got, want, SM_RTOL, SM_ATOL, "mask + device lengths")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masked_softmax_16bit(ctx, rng, dtype):
    X = ctx.array(f32(rng, 2, 5, 19), dtype)
    Xs = X.numpy().astype(np.float64)  # the stored (rounded) inputs
    got = clattn.masked_softmax(X, [19, 3], out=poisoned(ctx, X.shape, dtype)).numpy()
    want = ref.masked_softmax(Xs, ref.blocked(X.shape, [19, 3]))
    u = U16[dtype]  # one rounding of each float32 weight
    ref.assert_close(np.asarray(got, np.float64), want, SM_RTOL + u * (1 + SM_RTOL),
                     SM_ATOL + 2.0 ** -24, f"softmax {dtype}")


ATT_CASES = [
    # (Q shape, K shape, V shape, lens, kwargs)
    ((1, 1, 1), (1, 1, 1), (1, 1, 1), None, {}),
    ((2, 5, 3), (2, 7, 3), (2, 7, 4), [0, 7], {}),
    ((3, 17, 16), (3, 15, 16), (3, 15, 17), [[i % 16 for i in range(17)]] * 3, {}),
    ((2, 4, 5, 16), (2, 2, 9, 16), (2, 2, 9, 8), None,
     {"causal": True, "align": "bottom_right"}),                          # grouped-query
    ((2, 3, 33, 8), (2, 3, 65, 8), (2, 3, 65, 8), None, {"window": (5, 3)}),
    ((2, 6, 8), (2, 6, 8), (2, 6, 8), None, {"causal": True, "scale": 0.3}),
    ((2, 6, 8), (2, 6, 8), (2, 6, 8), [0, 6], {"fill": float("-inf")}),
]


@pytest.mark.parametrize("qs,ks,vs,lens,kw", ATT_CASES)
def test_dot_product_attention(ctx, rng, qs, ks, vs, lens, kw):
    Q, K, V = f32(rng, *qs), f32(rng, *ks), f32(rng, *vs)
    lens_arr = None if lens is None else np.array(lens)
    shape = qs[:-1] + ks[-2:-1]
    blk = ref.blocked(shape, lens_arr, None, kw.get("causal", False),
                      kw.get("align", "top_left"), kw.get("window"))
    want_o, want_w, want_l = ref.attention(Q, K, V, blk, kw.get("scale"), kw.get("fill", -1e6))
    sc = np.maximum(np.abs(want_o), ref.out_scale(want_w, V))
    what = f"attention {qs} {ks} {vs} {lens} {kw}"
    # The fused path (no weights) with the LSE, then the unfused one with the weights.
    out, lse = clattn.dot_product_attention(Q, K, V, lens, need_lse=True,
                                            out=poisoned(ctx, qs[:-1] + vs[-1:]), **kw)
    ref.assert_scaled(out.numpy(), want_o, sc, OUT_TOL, what + " fused")
    fin = np.isfinite(want_l)
    ref.assert_scaled(lse.numpy()[fin], want_l[fin], 1 + np.abs(want_l[fin]), 1e-5,
                      what + " lse")
    out, w = clattn.dot_product_attention(Q, K, V, lens, need_weights=True,
                                          out=poisoned(ctx, qs[:-1] + vs[-1:]), **kw)
    ref.assert_scaled(out.numpy(), want_o, sc, OUT_TOL, what + " unfused")
    ref.assert_close(w.numpy(), want_w, W_RTOL, W_ATOL, what + " weights")


def test_dot_product_attention_bias_alibi(ctx, rng):
    Q, K, V = f32(rng, 2, 3, 5, 8), f32(rng, 2, 3, 11, 8), f32(rng, 2, 3, 11, 8)
    bias = f32(rng, 1, 3, 5, 11)
    slopes = np.array([0.5, 0.25, 0.125], np.float32)
    i, k = np.arange(5)[:, None], np.arange(11)[None, :]
    alibi = -slopes[:, None, None] * np.abs(i + 11 - 5 - k)
    S = np.einsum("bhqd,bhkd->bhqk", Q.astype(np.float64), K.astype(np.float64)) / np.sqrt(8)
    W = ref.masked_softmax(S + bias + alibi, np.zeros(S.shape, bool))
    out = clattn.dot_product_attention(Q, K, V, bias=bias, alibi_slopes=slopes).numpy()
    ref.assert_scaled(out, W @ V, ref.out_scale(W, V), OUT_TOL, "bias + ALiBi")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dot_product_attention_16bit(ctx, rng, dtype):
    Q, K, V = (ctx.array(f32(rng, 2, n, 16), dtype) for n in (9, 13, 13))
    Qs, Ks, Vs = (a.numpy().astype(np.float64) for a in (Q, K, V))
    want, W, _ = ref.attention(Qs, Ks, Vs, ref.blocked((2, 9, 13), [13, 4]))
    out = clattn.dot_product_attention(Q, K, V, [13, 4], out=poisoned(ctx, (2, 9, 16), dtype))
    assert out.dtype == dtype
    tol = OUT_TOL + U16[dtype] * (1 + OUT_TOL)
    sc = np.maximum(np.abs(want), ref.out_scale(W, Vs)) + 2.0 ** -24 / tol
    ref.assert_scaled(np.asarray(out.numpy(), np.float64), want, sc, tol, f"attention {dtype}")


def test_dropout_in_attention(ctx, rng):
    Q, K, V = f32(rng, 2, 4, 8), f32(rng, 2, 6, 8), f32(rng, 2, 6, 8)
    a = clattn.dot_product_attention(Q, K, V, dropout_p=0.5, seed=7).numpy()
    b = clattn.dot_product_attention(Q, K, V, dropout_p=0.5, seed=7).numpy()
    c = clattn.dot_product_attention(Q, K, V, dropout_p=0.5, seed=7, offset=1).numpy()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    zero = clattn.dot_product_attention(Q, K, V, dropout_p=1.0).numpy()
    assert (zero == 0).all()


def test_additive_attention_d2l_example(ctx):
    # d2l 11.3.2: identical keys, so the weights are uniform over each sequence's valid keys.
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((2, 1, 20)).astype(np.float32)
    keys = np.ones((2, 10, 2), np.float32)
    values = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    W_q, W_k, w_v = f32(rng, 8, 20), f32(rng, 8, 2), f32(rng, 1, 8)
    out, w = clattn.additive_attention(queries, keys, values, W_q, W_k, w_v, [2, 6],
                                       need_weights=True)
    want_w = np.zeros((2, 1, 10))
    want_w[0, 0, :2], want_w[1, 0, :6] = 1 / 2, 1 / 6
    ref.assert_close(w.numpy(), want_w, W_RTOL, W_ATOL, "d2l additive weights")
    ref.assert_scaled(out.numpy(), want_w @ values, ref.out_scale(want_w, values), OUT_TOL,
                      "d2l additive out")


def test_additive_attention(ctx, rng):
    q, k, v = f32(rng, 3, 5, 7), f32(rng, 3, 11, 3), f32(rng, 3, 11, 13)
    W_q, W_k, w_v = f32(rng, 17, 7), f32(rng, 17, 3), f32(rng, 1, 17)
    lens = np.array([[0, 11, 4, 1, 7]] * 3)
    want_o, want_w = ref.additive(q, k, v, W_q, W_k, w_v, ref.blocked((3, 5, 11), lens))
    out, w = clattn.additive_attention(q, k, v, W_q, W_k, w_v, lens, need_weights=True,
                                       out=poisoned(ctx, (3, 5, 13)))
    ref.assert_close(w.numpy(), want_w, W_RTOL, W_ATOL, "additive weights")
    ref.assert_scaled(out.numpy(), want_o, np.maximum(np.abs(want_o),
                      ref.out_scale(want_w, v)), OUT_TOL, "additive out")


@pytest.mark.parametrize("heads,kv_heads,bias", [(5, None, False), (4, 2, True), (3, 1, True)])
def test_multihead_attention(ctx, rng, heads, kv_heads, bias):
    B, Tq, Tk, dh = 2, 4, 7, 6
    hidden = heads * dh
    kvh = (kv_heads or heads) * dh
    q, k, v = f32(rng, B, Tq, 10), f32(rng, B, Tk, 9), f32(rng, B, Tk, 11)
    w = {"W_q": f32(rng, hidden, 10), "W_k": f32(rng, kvh, 9), "W_v": f32(rng, kvh, 11),
         "W_o": f32(rng, 13, hidden)}
    if bias:
        w.update(b_q=f32(rng, hidden), b_k=f32(rng, kvh), b_v=f32(rng, kvh), b_o=f32(rng, 13))
    lens = np.array([3, 0])
    want_o, want_w, mag = ref.multihead(q, k, v, heads, w, lambda s: ref.blocked(s, lens))
    out, wts = clattn.multihead_attention(q, k, v, heads, valid_lens=lens,
                                          num_kv_heads=kv_heads, need_weights=True,
                                          out=poisoned(ctx, (B, Tq, 13)), **w)
    assert wts.shape == (B, heads, Tq, Tk)
    ref.assert_close(wts.numpy(), want_w, W_RTOL, W_ATOL, "multi-head weights")
    ref.assert_scaled(out.numpy(), want_o, mag, OUT_TOL, "multi-head out")


def test_decode_attention(ctx, rng):
    B, Hq, Hkv, Kmax, d, dv, Qn = 2, 4, 2, 16, 8, 5, 2
    kc, vc = f32(rng, B, Hkv, Kmax, d), f32(rng, B, Hkv, Kmax, dv)
    kn, vn = f32(rng, B, Hkv, Qn, d), f32(rng, B, Hkv, Qn, dv)
    Q = f32(rng, B, Hq, Qn, d)
    k_cache, v_cache = ctx.array(kc), ctx.array(vc)
    lens = ctx.array(np.array([5, 0], np.int32))
    out = clattn.decode_attention(Q, k_cache, v_cache, lens, kn, vn, advance=True, causal=True,
                                  out=poisoned(ctx, (B, Hq, Qn, dv))).numpy()
    assert lens.numpy().tolist() == [7, 2]
    for b, n0 in enumerate((5, 0)):
        keys = np.concatenate([kc[b][:, :n0], kn[b]], axis=1)
        vals = np.concatenate([vc[b][:, :n0], vn[b]], axis=1)
        blk = ref.blocked((Hq, Qn, n0 + Qn), causal=True, align="bottom_right")
        want, W, _ = ref.attention(Q[b][None], keys[None], vals[None], blk[None])
        ref.assert_scaled(out[b][None], want, np.maximum(np.abs(want),
                          ref.out_scale(W, vals[None])), OUT_TOL, f"decode sequence {b}")
    assert np.array_equal(k_cache.numpy()[0][:, 5:7], kn[0])


@pytest.mark.parametrize("fused", [True, False])
def test_dot_product_attention_backward(ctx, rng, fused):
    Q, K, V = f32(rng, 2, 3, 5, 8), f32(rng, 2, 3, 7, 8), f32(rng, 2, 3, 7, 6)
    dout = f32(rng, 2, 3, 5, 6)
    kw = {"causal": True, "align": "bottom_right"}
    blk = ref.blocked((2, 3, 5, 7), [7, 3], None, True, "bottom_right")
    out = lse = None
    if fused:
        out, lse = clattn.dot_product_attention(Q, K, V, [7, 3], need_lse=True, **kw)
    dQ, dK, dV = clattn.dot_product_attention_backward(Q, K, V, dout, [7, 3], out=out, lse=lse,
                                                       **kw)
    want = ref.attention_backward(Q, K, V, dout, blk)
    absd = ref.attention_backward(np.abs(Q), np.abs(K), np.abs(V), np.abs(dout), blk)
    for name, got, w, mag in zip(("dQ", "dK", "dV"), (dQ, dK, dV), want, absd):
        ref.assert_scaled(got.numpy(), w, np.abs(mag) + np.abs(w) + 1e-6, GRAD_TOL,
                          f"{name} fused={fused}")
    dq, dk, dv = clattn.dot_product_attention_backward(Q, K, V, dout, [7, 3], need=("dv",), **kw)
    assert dq is None and dk is None
    ref.assert_scaled(dv.numpy(), want[2], np.abs(absd[2]) + 1e-6, GRAD_TOL, "dV alone")


def test_matmul_linear_dropout(ctx, rng):
    A, Bm = f32(rng, 3, 17, 5), f32(rng, 3, 17, 7)
    got = clattn.matmul(A, Bm, trans_a=True).numpy()
    want = np.swapaxes(A, -1, -2).astype(np.float64) @ Bm
    ref.assert_scaled(got, want, np.abs(np.swapaxes(A, -1, -2)) @ np.abs(Bm), 1e-5, "matmul")
    x, W, b = f32(rng, 4, 9), f32(rng, 6, 9), f32(rng, 6)
    ref.assert_scaled(clattn.linear(x, W, b).numpy(), ref.linear(x, W, b),
                      np.abs(x) @ np.abs(W).T + np.abs(b), 1e-5, "linear")
    y = clattn.dropout(x, 0.5, seed=3).numpy()
    kept = y != 0
    assert 0 < kept.sum() < y.size
    assert np.allclose(y[kept], 2 * x[kept], rtol=2 ** -23)
    assert np.array_equal(clattn.dropout(x, 0.5, training=False).numpy(), x)


def test_dropout_streams_agree(ctx, rng):
    # Attention's dropout and clattn.dropout draw one Philox mask for (seed, offset, element):
    # the dropped weights are the output for V = I. Distinct seed and offset values tell a swap.
    Q, K = f32(rng, 2, 5, 8), f32(rng, 2, 7, 8)
    eye = np.tile(np.eye(7, dtype=np.float32), (2, 1, 1))
    _, W = clattn.dot_product_attention(Q, K, eye, need_weights=True)
    dropped = clattn.dot_product_attention(Q, K, eye, dropout_p=0.4, seed=3, offset=5).numpy()
    want = clattn.dropout(W, 0.4, seed=3, offset=5).numpy()
    assert np.allclose(dropped, want, rtol=1e-5, atol=1e-7)
    assert not np.allclose(want, clattn.dropout(W, 0.4, seed=5, offset=3).numpy())


def test_default_output_dtypes(ctx, rng):
    X = ctx.array(f32(rng, 2, 3, 5), "float16")
    assert clattn.masked_softmax(X).dtype == "float16"
    assert clattn.masked_softmax(X, out_dtype="float32").dtype == "float32"
    Q = ctx.array(f32(rng, 2, 3, 8), "bfloat16")
    out, w, lse = clattn.dot_product_attention(Q, Q, Q, need_weights=True, need_lse=True)
    assert (out.dtype, w.dtype, lse.dtype) == ("bfloat16", "bfloat16", "float32")


def test_backward_reads_out_and_lse(ctx, rng):
    # Where the fused backward runs (CPU shapes), it recomputes P from the LSE it is given, so a
    # wrong LSE shows: proof that out and lse reach the C call. The chain ignores them.
    if not ctx.tuning("backward@d64").startswith("cpu"):
        pytest.skip("the backward here is the unfused chain, which does not read the LSE")
    Q, K, V, dout = f32(rng, 1, 6, 8), f32(rng, 1, 9, 8), f32(rng, 1, 9, 8), f32(rng, 1, 6, 8)
    out, lse = clattn.dot_product_attention(Q, K, V, need_lse=True)
    good = clattn.dot_product_attention_backward(Q, K, V, dout, out=out, lse=lse)[0].numpy()
    shifted = ctx.array(lse.numpy() + 1.0)
    bad = clattn.dot_product_attention_backward(Q, K, V, dout, out=out, lse=shifted)[0].numpy()
    assert not np.allclose(good, bad)


def test_decode_scale_and_window(ctx, rng):
    B, H, Kmax, d = 1, 2, 12, 8
    kc, vc, Q = f32(rng, B, H, Kmax, d), f32(rng, B, H, Kmax, d), f32(rng, B, H, 1, d)
    lens = ctx.array(np.array([10], np.int32))
    out = clattn.decode_attention(Q, ctx.array(kc), ctx.array(vc), lens, scale=0.3,
                                  window=(3, None)).numpy()
    blk = ref.blocked((H, 1, 10), window=(3, None), align="bottom_right")
    want, W, _ = ref.attention(Q[0], kc[0][:, :10], vc[0][:, :10], blk, scale=0.3)
    ref.assert_scaled(out[0], want, ref.out_scale(W, vc[0][:, :10]), OUT_TOL, "decode window")


def test_matmul_alpha_and_shared_operand(ctx, rng):
    A, B2 = f32(rng, 3, 4, 5), f32(rng, 5, 6)  # a 2-D B shared by every batch
    got = clattn.matmul(A, B2, alpha=0.5).numpy()
    assert got.shape == (3, 4, 6)
    want = 0.5 * A.astype(np.float64) @ B2
    ref.assert_scaled(got, want, 0.5 * np.abs(A) @ np.abs(B2), 1e-5, "alpha, shared B")
    A2, B = f32(rng, 4, 5), f32(rng, 3, 5, 6)  # a 2-D A shared, stored transposed
    got = clattn.matmul(A2.T.copy(), B, trans_a=True).numpy()
    assert got.shape == (3, 4, 6)
    ref.assert_scaled(got, A2.astype(np.float64) @ B, np.abs(A2) @ np.abs(B), 1e-5, "shared A")


def test_sync_checks_device_lengths(ctx, rng):
    X = f32(rng, 2, 3, 4)
    checked = clattn.Context(sync=True)
    try:
        lens = checked.array(np.array([9, 1], np.int32))  # 9 > K = 4
        with pytest.raises(clattn.InvalidArgument, match="valid_lens"):
            clattn.masked_softmax(X, lens, ctx=checked)
    finally:
        checked.close()
    unchecked = clattn.Context(sync=False)
    try:  # clamped to K on the device
        lens = unchecked.array(np.array([9, 1], np.int32))
        got = clattn.masked_softmax(X, lens, ctx=unchecked).numpy()
        ref.assert_close(got, ref.masked_softmax(X, ref.blocked(X.shape, [4, 1])), SM_RTOL,
                         SM_ATOL, "clamped lengths")
    finally:
        unchecked.close()
