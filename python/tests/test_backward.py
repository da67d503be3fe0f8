"""The backward functions and the modules' backward(): each gradient against central differences
of the double-precision reference (or its analytic gradient), and against torch's autograd on
d2l's code where torch is importable.

Multi-head gradients are compared element for element against the analytic double reference
(itself checked against differences), within GRAD_TOL of the magnitudes of the terms each sums.
The others check the binding's wiring (each gradient reaches its own name, the mask, scale and
dropout reach the backward) norm-wise, max |got - ref| <= WIRE_TOL max |ref|, where a gradient
sent to the wrong name or computed with the wrong mask is off by O(1); the kernels' element-wise
accuracy there is the C suite's (tests/test_backward.c)."""
import numpy as np
import pytest

import clattn
import reference as ref
from test_modules import _t, d2l_torch, needs_torch, torch

WIRE_TOL = 1e-4
GRAD_TOL = 1e-5  # as tests/test_backward.c: relative to the magnitudes of the summed terms


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def numeric_grad(f, x, dout, h=1e-6):
    """d sum(dout * f(x)) / dx by central differences in double precision."""
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = np.sum(dout * f(x))
        x[i] = old - h
        g[i] = (up - np.sum(dout * f(x))) / (2 * h)
        x[i] = old
    return g


def assert_grad(got, want, what):
    got = got.numpy() if isinstance(got, clattn.Array) else got
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    err = np.abs(got - want).max()
    assert err <= WIRE_TOL * np.abs(want).max(), \
        f"{what}: max error {err:.3g} against max |grad| {np.abs(want).max():.3g}"


def test_masked_softmax_backward(ctx, rng):
    X, dy = f32(rng, 2, 3, 7), f32(rng, 2, 3, 7)
    blk = ref.blocked(X.shape, [0, 5], None, True)
    y = clattn.masked_softmax(X, [0, 5], causal=True)
    got = clattn.masked_softmax_backward(y, dy, [0, 5], causal=True).numpy()
    yd = y.numpy().astype(np.float64)
    want = np.where(blk, 0.0, yd * (dy - (dy * yd).sum(axis=-1, keepdims=True)))
    assert_grad(got, want, "softmax backward")
    assert (got[blk] == 0).all()


def _mha_case(rng, bias):
    q, k = f32(rng, 2, 3, 5), f32(rng, 2, 4, 6)
    w = {"W_q": f32(rng, 4, 5), "W_k": f32(rng, 4, 6), "W_v": f32(rng, 4, 6),
         "W_o": f32(rng, 3, 4)}
    if bias:
        w.update(b_q=f32(rng, 4), b_k=f32(rng, 4), b_v=f32(rng, 4), b_o=f32(rng, 3))
    return q, k, k.copy(), w


def test_multihead_reference_against_differences(rng):
    # The analytic multi-head reference below, checked once against central differences.
    q, k, v, w = _mha_case(rng, bias=True)
    lens, dout = np.array([4, 2]), f32(rng, 2, 3, 3)

    def blk(s):
        return ref.blocked(s, lens, None, True, "bottom_right")
    grads, _ = ref.multihead_backward(q, k, v, 2, w, blk, dout)
    inputs = {"queries": q, "keys": k, "values": v, **w}
    for name, x in inputs.items():
        def f(xd, name=name):
            a = {**inputs, name: xd}
            return ref.multihead(a["queries"], a["keys"], a["values"], 2,
                                 {n: a[n] for n in w}, blk)[0]
        num = numeric_grad(f, x, dout)
        assert np.abs(grads["d" + name] - num).max() <= 1e-6 * (1 + np.abs(num).max()), name


@pytest.mark.parametrize("training", [True, False])  # saved forward / forward computed again
@pytest.mark.parametrize("kv_heads", [None, 1])
def test_multihead_module_backward(ctx, rng, training, kv_heads):
    q, k, v, w = _mha_case(rng, bias=True)
    if kv_heads:  # multi-query: one K/V head of size 2
        w.update(W_k=w["W_k"][:2], W_v=w["W_v"][:2], b_k=w["b_k"][:2], b_v=w["b_v"][:2])
    lens = np.array([4, 2])
    dout = f32(rng, 2, 3, 3)
    net = clattn.MultiHeadAttention(4, 2, bias=True, num_kv_heads=kv_heads).load_weights(**w)
    net.train(training)
    net(q, k, v, lens, causal=True, align="bottom_right")
    got = net.backward(dout)

    def blk(s):
        return ref.blocked(s, lens, None, True, "bottom_right")
    want, mag = ref.multihead_backward(q, k, v, 2, w, blk, dout)
    assert sorted(got) == sorted(want)
    for name in want:
        ref.assert_scaled(got[name].numpy(), want[name], mag[name] + 1e-30, GRAD_TOL,
                          f"{name} training={training} kv_heads={kv_heads}")


def test_additive_module_backward(ctx, rng):
    q, k, v = f32(rng, 2, 3, 4), f32(rng, 2, 5, 3), f32(rng, 2, 5, 2)
    W = {"W_q": f32(rng, 6, 4), "W_k": f32(rng, 6, 3), "w_v": f32(rng, 1, 6)}
    lens = np.array([[5, 1, 3], [0, 2, 5]])
    dout = f32(rng, 2, 3, 2)
    net = clattn.AdditiveAttention(6).load_weights(**W)
    net(q, k, v, lens)
    grads = net.backward(dout)
    blk = ref.blocked((2, 3, 5), lens)
    inputs = {"queries": q, "keys": k, "values": v, **W}
    for name, x in inputs.items():
        def f(xd, name=name):
            a = {**inputs, name: xd}
            return ref.additive(a["queries"], a["keys"], a["values"], a["W_q"], a["W_k"],
                                a["w_v"], blk)[0]
        assert_grad(grads["d" + name], numeric_grad(f, x, dout), f"additive d{name}")


def test_dot_product_module_backward_with_dropout(ctx, rng):
    q, k, v, dout = f32(rng, 2, 4, 8), f32(rng, 2, 6, 8), f32(rng, 2, 6, 5), f32(rng, 2, 4, 5)
    net = clattn.DotProductAttention(0.5, seed=11)  # training: a dropout mask per call
    net(q, k, v, [6, 3], scale=0.7)
    net(q, k, v, [6, 3], scale=0.7)  # the second call's mask (offset 1) is the one to redraw
    grads = net.backward(dout)
    # out = P_drop V is linear in V: P_drop is the output for V = I (the same seed and offset).
    eye = np.tile(np.eye(6, dtype=np.float32), (2, 1, 1))
    P = clattn.dot_product_attention(q, k, eye, [6, 3], scale=0.7, dropout_p=0.5, seed=11,
                                     offset=1).numpy().astype(np.float64)
    assert_grad(grads["dvalues"], np.swapaxes(P, -1, -2) @ dout, "dvalues with dropout")
    wrong = clattn.dot_product_attention(q, k, eye, [6, 3], scale=0.7, dropout_p=0.5, seed=11,
                                         offset=0).numpy()
    assert not np.allclose(wrong, P)  # the test can tell the two calls' masks apart


def test_functional_backward_bad_input(ctx, rng):
    q, k, v, w = _mha_case(rng, bias=False)
    with pytest.raises(ValueError, match="need: no gradient named"):
        clattn.multihead_attention_backward(q, k, v, f32(rng, 2, 3, 3), 2, need=("db_q",), **w)
    with pytest.raises(RuntimeError, match="forward first"):
        clattn.DotProductAttention().backward(np.zeros((1, 1, 1), np.float32))
    with pytest.raises(clattn.Error, match="saved"):
        clattn.multihead_attention_backward(q, k, v, f32(rng, 2, 3, 3), 2, saved=ctx.zeros(5),
                                            **w)


@needs_torch
def test_multihead_backward_against_torch(ctx, rng):
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = d2l_torch.MultiHeadAttention(8, 2, 0.0, bias=True)
    X, Y = f32(rng, 2, 3, 5), f32(rng, 2, 4, 6)
    lens = np.array([4, 1])
    Xt, Yt = _t(X).requires_grad_(), _t(Y).requires_grad_()
    out = net(Xt, Yt, Yt, _t(lens))
    dout = f32(rng, *out.shape)
    out.backward(_t(dout))
    mine = clattn.MultiHeadAttention.from_torch(net)
    mine(X, Y, Y, lens)
    got = mine.backward(dout)
    w = {n: a.numpy() for n, a in mine.weights.items()}
    _, mag = ref.multihead_backward(X, Y, Y, 2, w, lambda s: ref.blocked(s, lens), dout)
    want = {"dqueries": Xt.grad, "dkeys+dvalues": Yt.grad}
    for n in ("q", "k", "v", "o"):
        layer = getattr(net, f"W_{n}")
        want[f"dW_{n}"], want[f"db_{n}"] = layer.weight.grad, layer.bias.grad
    got["dkeys+dvalues"] = got["dkeys"].numpy() + got["dvalues"].numpy()
    mag["dkeys+dvalues"] = mag["dkeys"] + mag["dvalues"]
    for name, t in want.items():  # torch's float32 rounding too: twice the tolerance
        g = got[name].numpy() if isinstance(got[name], clattn.Array) else got[name]
        ref.assert_scaled(g, t.double().numpy(), mag[name] + 1e-30, 2 * GRAD_TOL,
                          f"{name} vs torch")
