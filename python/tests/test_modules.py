"""The d2l modules: against the NumPy references, and against d2l's PyTorch code and
torch.nn.MultiheadAttention when torch is importable (their weights loaded from state_dicts)."""
import os
import sys

import numpy as np
import pytest

import clattn
import reference as ref
from test_functional import OUT_TOL, W_ATOL, W_RTOL

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "tools")
try:
    import torch
    from torch import nn
    sys.path.insert(0, TOOLS)
    import d2l_torch  # d2l's PyTorch code, shared with tools/torch_peers.py
except ImportError:
    torch = nn = d2l_torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch (or the repository's tools/) "
                                 "is not there")


def test_dot_product_attention_module(ctx, rng):
    # d2l 11.3.3's example shapes: queries (2, 1, 2), keys (2, 10, 2), values (2, 10, 4).
    q, k = rng.standard_normal((2, 1, 2)).astype(np.float32), np.ones((2, 10, 2), np.float32)
    v = np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1))
    attention = clattn.DotProductAttention(dropout=0.5)
    attention.eval()
    out = attention(q, k, v, np.array([2, 6]))
    assert out.shape == (2, 1, 4)
    want_o, want_w, _ = ref.attention(q, k, v, ref.blocked((2, 1, 10), [2, 6]))
    ref.assert_close(attention.attention_weights.numpy(), want_w, W_RTOL, W_ATOL, "weights")
    ref.assert_scaled(out.numpy(), want_o, ref.out_scale(want_w, v), OUT_TOL, "out")
    attention.train()
    a, b = attention(q, k, v, [2, 6]).numpy(), attention(q, k, v, [2, 6]).numpy()
    assert not np.array_equal(a, b)  # a new dropout mask each call in training mode


def test_multihead_module_d2l_example(ctx, rng):
    # d2l 11.5: 100 hiddens, 5 heads, X (2, 4, 100), Y (2, 6, 100), valid_lens [3, 2].
    attention = clattn.MultiHeadAttention(100, 5, 0.5, init_seed=3)
    attention.eval()
    X, Y = np.ones((2, 4, 100), np.float32), np.ones((2, 6, 100), np.float32)
    out = attention(X, Y, Y, np.array([3, 2]))
    assert out.shape == (2, 4, 100)
    assert attention.attention_weights.shape == (2, 5, 4, 6)
    w = {n: a.numpy() for n, a in attention.weights.items() if a is not None}
    want_o, want_w, mag = ref.multihead(X, Y, Y, 5, w, lambda s: ref.blocked(s, [3, 2]))
    ref.assert_close(attention.attention_weights.numpy(), want_w, W_RTOL, W_ATOL, "weights")
    ref.assert_scaled(out.numpy(), want_o, mag + np.abs(want_o), OUT_TOL, "out")


def test_additive_module_lazy_init(ctx, rng):
    attention = clattn.AdditiveAttention(8, 0.1, init_seed=1).eval()
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in
               ((2, 3, 5), (2, 7, 4), (2, 7, 6)))
    out = attention(q, k, v, [7, 2])
    W_q, W_k, w_v = attention.W_q.numpy(), attention.W_k.numpy(), attention.w_v.numpy()
    assert W_q.shape == (8, 5) and W_k.shape == (8, 4) and w_v.shape == (1, 8)
    assert np.abs(W_q).max() <= 1 / np.sqrt(5)  # LazyLinear's bound
    want_o, want_w = ref.additive(q, k, v, W_q, W_k, w_v, ref.blocked((2, 3, 7), [7, 2]))
    ref.assert_scaled(out.numpy(), want_o, ref.out_scale(want_w, v), OUT_TOL, "additive")


def _t(a):
    return torch.from_numpy(np.asarray(a))


@needs_torch
@pytest.mark.parametrize("bias", [False, True])
def test_multihead_against_d2l_torch(ctx, rng, bias):
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = d2l_torch.MultiHeadAttention(20, 4, 0.5, bias).eval()
    X = rng.standard_normal((3, 5, 12)).astype(np.float32)
    Y = rng.standard_normal((3, 7, 9)).astype(np.float32)
    lens = np.array([7, 0, 3])
    with torch.no_grad():
        want = net(_t(X), _t(Y), _t(Y), _t(lens)).double().numpy()
    want_w = net.attention.attention_weights.double().numpy().reshape(3, 4, 5, 7)
    mine = clattn.MultiHeadAttention.from_torch(net)
    assert not mine.training
    out = mine(X, Y, Y, lens)
    ref.assert_close(mine.attention_weights.numpy(), want_w, W_RTOL, 1e-6, "weights vs d2l")
    w = {n: a.numpy() for n, a in mine.weights.items() if a is not None}
    _, _, mag = ref.multihead(X, Y, Y, 4, w, lambda s: ref.blocked(s, lens))
    # torch's float32 result carries its own rounding: twice the tolerance covers both.
    ref.assert_scaled(out.numpy(), want, mag + np.abs(want), 2 * OUT_TOL, "out vs d2l")


@needs_torch
def test_additive_against_d2l_torch(ctx, rng):
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = d2l_torch.AdditiveAttention(8, 0.1).eval()
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in
               ((2, 3, 5), (2, 7, 4), (2, 7, 6)))
    lens = np.array([[7, 1, 0], [2, 7, 5]])
    with torch.no_grad():
        want = net(_t(q), _t(k), _t(v), _t(lens)).double().numpy()
    mine = clattn.AdditiveAttention(8).eval().load_state_dict(net.state_dict())
    out = mine(q, k, v, lens)
    ref.assert_close(mine.attention_weights.numpy(), net.attention_weights.double().numpy(),
                     W_RTOL, 1e-6, "weights vs d2l")
    ref.assert_scaled(out.numpy(), want, ref.out_scale(mine.attention_weights.numpy(), v),
                      2 * OUT_TOL, "out vs d2l")


@needs_torch
@pytest.mark.parametrize("kdim", [None, 6])
def test_multihead_against_torch_nn(ctx, rng, kdim):
    torch.manual_seed(int(rng.integers(1 << 30)))
    net = nn.MultiheadAttention(16, 4, batch_first=True, kdim=kdim, vdim=kdim).eval()
    with torch.no_grad():  # nonzero biases, so the test sees them
        net.in_proj_bias.uniform_(-0.5, 0.5)
        net.out_proj.bias.uniform_(-0.5, 0.5)
    X = rng.standard_normal((2, 5, 16)).astype(np.float32)
    Y = rng.standard_normal((2, 9, kdim or 16)).astype(np.float32)
    lens = np.array([9, 4])
    pad = np.arange(9)[None, :] >= lens[:, None]  # key_padding_mask: True = ignored
    with torch.no_grad():
        want, want_w = net(_t(X), _t(Y), _t(Y), key_padding_mask=_t(pad),
                           average_attn_weights=False)
    mine = clattn.MultiHeadAttention.from_torch(net)
    out = mine(X, Y, Y, lens, fill=float("-inf"))  # masked_fill(-inf), as torch's padding mask
    ref.assert_close(mine.attention_weights.numpy(), want_w.double().numpy(), W_RTOL, 1e-6,
                     "weights vs nn.MultiheadAttention")
    w = {n: a.numpy() for n, a in mine.weights.items() if a is not None}
    _, _, mag = ref.multihead(X, Y, Y, 4, w, lambda s: ref.blocked(s, lens))
    want = want.double().numpy()
    ref.assert_scaled(out.numpy(), want, mag + np.abs(want), 2 * OUT_TOL,
                      "out vs nn.MultiheadAttention")


@needs_torch
def test_masked_softmax_against_d2l_torch(ctx, rng):
    X = rng.random((2, 2, 4)).astype(np.float32)
    for lens in (np.array([2, 3]), np.array([[1, 3], [2, 4]])):
        want = d2l_torch.masked_softmax(_t(X).clone(), _t(lens)).double().numpy()
        ref.assert_close(clattn.masked_softmax(X, lens).numpy(), want, 2e-6, 1e-9,
                         f"masked_softmax vs d2l {lens.tolist()}")


def _mha_weights(rng, e, kdim):
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in
            (("W_q", (e, e)), ("W_k", (e, kdim)), ("W_v", (e, kdim)), ("W_o", (e, e)),
             ("b_q", (e,)), ("b_k", (e,)), ("b_v", (e,)), ("b_o", (e,)))}


@pytest.mark.parametrize("packed", [True, False])
def test_mha_state_dict_layouts(ctx, rng, packed):
    # torch.nn.MultiheadAttention's keys, written here from its documented layout (no torch
    # needed): in_proj_weight stacks W_q, W_k, W_v (or q/k/v_proj_weight when kdim != E),
    # in_proj_bias the three biases, out_proj the output layer.
    w = _mha_weights(rng, 6, 6 if packed else 4)
    sd = {"out_proj.weight": w["W_o"], "out_proj.bias": w["b_o"],
          "in_proj_bias": np.concatenate([w["b_q"], w["b_k"], w["b_v"]])}
    if packed:
        sd["in_proj_weight"] = np.concatenate([w["W_q"], w["W_k"], w["W_v"]])
    else:
        sd.update(q_proj_weight=w["W_q"], k_proj_weight=w["W_k"], v_proj_weight=w["W_v"])
    net = clattn.MultiHeadAttention(6, 2).load_state_dict(sd)
    for n, a in w.items():
        assert np.array_equal(net.weights[n].numpy(), a), n
    # d2l's keys, with bias=True
    d2l = {f"{n}.weight": w[n] for n in ("W_q", "W_k", "W_v", "W_o")}
    d2l.update({f"W_{c}.bias": w[f"b_{c}"] for c in "qkvo"})
    net = clattn.MultiHeadAttention(6, 2, bias=True).load_state_dict(d2l)
    for n, a in w.items():
        assert np.array_equal(net.weights[n].numpy(), a), n


def test_weights_against_the_module_configuration(ctx):
    # Weights that contradict num_hiddens, num_kv_heads or bias=True: an error naming the
    # weight (these were taken, the output then of another width, the biases dropped).
    w = {n: np.ones(s, np.float32) for n, s in (("W_q", (8, 10)), ("W_k", (8, 10)),
                                                ("W_v", (8, 10)), ("W_o", (8, 8)))}
    with pytest.raises(ValueError, match="W_q: shape \\(8, 10\\).*\\(16, any\\)"):
        clattn.MultiHeadAttention(16, 2).load_weights(**w)
    with pytest.raises(ValueError, match="W_k: shape"):
        clattn.MultiHeadAttention(8, 2, num_kv_heads=1).load_weights(**w)
    with pytest.raises(ValueError, match="b_q: missing"):
        clattn.MultiHeadAttention(8, 2, bias=True).load_state_dict(
            {f"{n}.weight": a for n, a in w.items()})
    with pytest.raises(ValueError, match="b_o: shape"):
        clattn.MultiHeadAttention(8, 2).load_weights(**w, b_o=np.ones(3, np.float32))
    net = clattn.MultiHeadAttention(8, 2).load_weights(**dict(w, W_o=np.ones((3, 8), np.float32)))
    assert net(np.ones((1, 2, 10), np.float32), np.ones((1, 3, 10), np.float32),
               np.ones((1, 3, 10), np.float32)).shape == (1, 2, 3)  # W_o's own out_size
    with pytest.raises(ValueError, match="W_q: shape"):
        clattn.AdditiveAttention(16).load_weights(w["W_q"], w["W_k"], np.ones((1, 8), np.float32))
    with pytest.raises(ValueError, match="w_v: shape"):
        clattn.AdditiveAttention(8).load_weights(w["W_q"], w["W_k"], np.ones((8, 1), np.float32))


def test_mha_lazy_shapes(ctx, rng):
    net = clattn.MultiHeadAttention(8, 2, bias=True, num_kv_heads=1)
    q, k, v = f32_(rng, 2, 3, 5), f32_(rng, 2, 4, 6), f32_(rng, 2, 4, 7)
    assert net(q, k, v).shape == (2, 3, 8)
    shapes = {n: a.shape for n, a in net.weights.items()}
    assert shapes == {"W_q": (8, 5), "W_k": (4, 6), "W_v": (4, 7), "W_o": (8, 8), "b_q": (8,),
                      "b_k": (4,), "b_v": (4,), "b_o": (8,)}


def f32_(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", ["dot", "additive", "multihead"])
@pytest.mark.parametrize("as_list", [False, True])
def test_backward_reads_the_forward_inputs_as_they_were(ctx, rng, kind, as_list):
    # The caller changes its host arrays in place between forward and backward: the gradients
    # are still those of the forward's inputs (the same as a module that saw no change);
    # lengths and masks also as Python lists, which the ops take as well.
    make = {"dot": lambda: clattn.DotProductAttention(0.3, seed=5),
            "additive": lambda: clattn.AdditiveAttention(6, 0.3, seed=5, init_seed=2),
            "multihead": lambda: clattn.MultiHeadAttention(8, 2, 0.3, seed=5, init_seed=2)}[kind]
    q, k, v = f32_(rng, 2, 3, 8), f32_(rng, 2, 5, 8), f32_(rng, 2, 5, 8)
    lens = np.array([5, 2])
    mask = rng.random((3, 5)) < 0.8
    dout = f32_(rng, 2, 3, 8)
    want = make()
    want(q, k, v, lens, mask=mask)
    want = {n: g.numpy() for n, g in want.backward(dout).items() if g is not None}
    net = make()
    q2, k2, v2, lens2, mask2 = q.copy(), k.copy(), v.copy(), lens.copy(), mask.copy()
    if as_list:
        lens2, mask2 = lens2.tolist(), mask2.tolist()
    net(q2, k2, v2, lens2, mask=mask2)
    q2 *= 3
    k2 += 1
    v2[:] = 0
    lens2[:] = [1] * len(lens2)
    for row in mask2:
        row[:] = [False] * len(row)
    got = {n: g.numpy() for n, g in net.backward(dout).items() if g is not None}
    assert got.keys() == want.keys()
    for n in want:
        assert np.array_equal(got[n], want[n]), f"{kind}: {n} changed with the host inputs"


@pytest.mark.parametrize("make", [
    lambda: clattn.DotProductAttention(dropout=0.0),
    lambda: clattn.AdditiveAttention(8, 0.0, init_seed=1),
    lambda: clattn.MultiHeadAttention(8, 2, 0.0, init_seed=1)])
def test_modules_freed_without_the_cycle_collector(ctx, rng, make):
    # the backward closures hold no reference to their module: a module and what its last
    # forward holds on the device go when the last reference does, not at gc.collect()
    import gc
    import weakref
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    m = make()
    m(x, x, x)
    dead = weakref.ref(m)
    gc.disable()
    try:
        del m
        assert dead() is None
    finally:
        gc.enable()
