"""d2l's attention modules (chapter 11) over clattn: the same constructors and forward arguments,
weights from NumPy or a PyTorch state_dict, train() / eval() as torch.nn.Module's, and backward()
for the gradients of the last call."""
import math

import numpy as np

from . import functional as F
from ._args import Call, int_arg, probability_arg
from .array import to_numpy
from .context import default_context
from .weights import additive_from_state_dict, host_weight, mha_from_state_dict


class Module:
    """What the modules share: dropout in training mode, drawn from clattn's Philox stream keyed
    by (seed, calls so far), so every call draws a new mask and a seed replays them all."""

    def __init__(self, dropout, seed, need_weights, ctx):
        self.dropout = probability_arg(dropout, "dropout")
        self.seed = int_arg(seed, "seed", 0, 2**64 - 1)
        self.need_weights = bool(need_weights)
        self.training = True
        self.attention_weights = None
        self.ctx = ctx
        self._calls = 0
        self._backward = None

    def train(self, mode=True):
        self.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def context(self):
        return self.ctx if self.ctx is not None else default_context()

    def _dropout(self):
        if not (self.training and self.dropout > 0):
            return {}
        self._calls += 1
        return {"dropout_p": self.dropout, "seed": self.seed, "offset": self._calls - 1}

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def backward(self, dout):
        """The gradients of the last forward call's inputs (and weights) from dout, the
        gradient of its output: a dict of float32 Arrays (dqueries, dkeys, dvalues and each
        weight's, e.g. dW_q). The same dropout mask as that call's is redrawn."""
        if self._backward is None:
            raise RuntimeError("backward: call the module forward first")
        return self._backward(dout)

    def _hold(self, queries, keys, values, valid_lens, kwargs):
        """The forward's inputs as its backward will read them, whatever the caller does to its
        host arrays in between: queries, keys and values as device Arrays (host data uploaded
        once, for both passes), host lengths and keyword arrays (mask, bias, ...) copied. Device
        Arrays are read as they are when backward runs."""
        c = Call(self.ctx, queries, keys, values, valid_lens, *kwargs.values())
        qkv = [c.array(x, n) for x, n in ((queries, "queries"), (keys, "keys"),
                                          (values, "values"))]
        kw = {k: _snapshot(v) for k, v in kwargs.items()}
        return (*qkv, _snapshot(valid_lens), kw)

    def _upload(self, **weights):
        ctx = self.context()
        return {n: None if w is None else ctx.array(host_weight(w, n)) for n, w in weights.items()}


def _snapshot(x):
    """A copy of host array data (NumPy, PyTorch, and lists and tuples, which the ops take for
    lengths and masks, through their items); anything else (device Arrays, numbers) as it is."""
    if isinstance(x, np.ndarray) or (hasattr(x, "detach") and hasattr(x, "numpy")):
        return np.array(to_numpy(x), copy=True)
    if type(x) in (list, tuple):
        return type(x)(_snapshot(v) for v in x)
    return x


def _check_weight(w, name, shape):
    """w's shape against the one the module's configuration gives it (None: any size there)."""
    if len(w.shape) != len(shape) or any(n not in (None, m) for n, m in zip(shape, w.shape)):
        want = "(" + ", ".join("any" if n is None else str(n) for n in shape) + ")"
        raise ValueError(f"{name}: shape {tuple(w.shape)}, the module's configuration needs "
                         f"{want}")


def _backward_kwargs(kwargs):
    """A forward's keyword arguments that its backward takes too (the mask, scale, ...)."""
    return {k: v for k, v in kwargs.items() if k not in ("out", "out_dtype")}


def _lazy_linear(rng, out_features, in_features):
    """torch.nn.Linear's default initialisation: U(-1/sqrt(in), 1/sqrt(in))."""
    bound = 1.0 / math.sqrt(in_features)
    return rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32)


class DotProductAttention(Module):
    """d2l's DotProductAttention(dropout): forward(queries, keys, values, valid_lens=None)
    returns the output and keeps the weights (before dropout) in .attention_weights, as d2l
    does; need_weights=False skips them for the fused kernel. Further keyword arguments of
    forward (mask, causal, fill, scale, ...) are clattn.dot_product_attention's."""

    def __init__(self, dropout=0.0, *, seed=0, need_weights=True, ctx=None):
        super().__init__(dropout, seed, need_weights, ctx)

    def forward(self, queries, keys, values, valid_lens=None, **kwargs):
        queries, keys, values, valid_lens, kwargs = self._hold(queries, keys, values,
                                                               valid_lens, kwargs)
        drop = self._dropout()
        res = F.dot_product_attention(queries, keys, values, valid_lens,
                                      need_weights=self.need_weights, need_lse=True,
                                      ctx=self.ctx, **drop, **kwargs)
        out, self.attention_weights, lse = res if self.need_weights else (res[0], None, res[1])
        ctx = self.ctx  # the closures hold no self: module -> closure -> module would keep the
        # device memory they hold until the cyclic garbage collector ran

        def backward(dout):
            g = F.dot_product_attention_backward(queries, keys, values, dout, valid_lens,
                                                 out=out, lse=lse, ctx=ctx, **drop,
                                                 **_backward_kwargs(kwargs))
            return dict(zip(("dqueries", "dkeys", "dvalues"), g))
        self._backward = backward
        return out


class AdditiveAttention(Module):
    """d2l's AdditiveAttention(num_hiddens, dropout): W_q, W_k (num_hiddens x input size) and
    w_v (1 x num_hiddens) without biases, created as torch's LazyLinear does at the first call
    (seeded by init_seed) unless loaded first (load_state_dict, load_weights)."""

    def __init__(self, num_hiddens, dropout=0.0, *, seed=0, init_seed=0, need_weights=True,
                 ctx=None):
        super().__init__(dropout, seed, need_weights, ctx)
        self.num_hiddens = int_arg(num_hiddens, "num_hiddens")
        self.init_seed = init_seed
        self.W_q = self.W_k = self.w_v = None

    def load_weights(self, W_q, W_k, w_v):
        h = self.num_hiddens
        w = self._upload(W_q=W_q, W_k=W_k, w_v=w_v)
        for n, shape in (("W_q", (h, None)), ("W_k", (h, None)), ("w_v", (1, h))):
            _check_weight(w[n], n, shape)
        self.W_q, self.W_k, self.w_v = w["W_q"], w["W_k"], w["w_v"]
        return self

    def load_state_dict(self, state_dict, prefix=""):
        """d2l's AdditiveAttention.state_dict() (W_q.weight, W_k.weight, w_v.weight)."""
        return self.load_weights(**additive_from_state_dict(state_dict, prefix))

    def forward(self, queries, keys, values, valid_lens=None, **kwargs):
        if self.W_q is None:
            rng = np.random.default_rng(self.init_seed)
            h = self.num_hiddens
            self.load_weights(_lazy_linear(rng, h, np.shape(queries)[-1]),
                              _lazy_linear(rng, h, np.shape(keys)[-1]), _lazy_linear(rng, 1, h))
        queries, keys, values, valid_lens, kwargs = self._hold(queries, keys, values,
                                                               valid_lens, kwargs)
        drop = self._dropout()
        res = F.additive_attention(queries, keys, values, self.W_q, self.W_k, self.w_v,
                                   valid_lens, need_weights=self.need_weights, ctx=self.ctx,
                                   **drop, **kwargs)
        out, self.attention_weights = res if self.need_weights else (res, None)
        weights, ctx = (self.W_q, self.W_k, self.w_v), self.ctx  # no self: see above
        self._backward = lambda dout: F.additive_attention_backward(
            queries, keys, values, *weights, dout, valid_lens, ctx=ctx, **drop,
            **_backward_kwargs(kwargs))
        return out


class MultiHeadAttention(Module):
    """d2l's MultiHeadAttention(num_hiddens, num_heads, dropout, bias=False): W_q, W_k, W_v,
    W_o (num_hiddens outputs each), heads split as d2l's transpose_qkv. Weights: lazily
    initialised as torch's LazyLinear (init_seed), or load_state_dict of d2l's module or of
    torch.nn.MultiheadAttention (from_torch builds one from either module). num_kv_heads:
    grouped-query attention (W_k and W_v then have num_kv_heads x head size outputs).
    forward(queries (B, Q, q_size), keys, values, valid_lens=None) -> (B, Q, num_hiddens);
    .attention_weights holds (B, num_heads, Q, K) (d2l's (B * num_heads, Q, K), reshaped)."""

    def __init__(self, num_hiddens, num_heads, dropout=0.0, bias=False, *, num_kv_heads=None,
                 seed=0, init_seed=0, need_weights=True, ctx=None):
        super().__init__(dropout, seed, need_weights, ctx)
        self.num_hiddens = int_arg(num_hiddens, "num_hiddens")
        self.num_heads = int_arg(num_heads, "num_heads")
        self.num_kv_heads = num_kv_heads
        self.bias = bool(bias)
        self.init_seed = init_seed
        self.weights = None

    def load_weights(self, W_q, W_k, W_v, W_o, b_q=None, b_k=None, b_v=None, b_o=None):
        """W_q (num_hiddens, q_size), W_k and W_v (kv, k_size / v_size) with kv = num_hiddens /
        num_heads * num_kv_heads, W_o (out_size, num_hiddens); biases of those outputs or None,
        all four given with bias=True."""
        w = self._upload(W_q=W_q, W_k=W_k, W_v=W_v, W_o=W_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
        h, heads = self.num_hiddens, self.num_heads
        kv = h // heads * (self.num_kv_heads or heads) if heads and h % heads == 0 else None
        for n, rows in (("q", h), ("k", kv), ("v", kv)):
            _check_weight(w[f"W_{n}"], f"W_{n}", (rows, None))
        _check_weight(w["W_o"], "W_o", (None, h))
        for n, size in (("q", h), ("k", kv), ("v", kv), ("o", w["W_o"].shape[0])):
            b = w[f"b_{n}"]
            if b is None and self.bias:
                raise ValueError(f"b_{n}: missing, and the module has bias=True")
            if b is not None:
                _check_weight(b, f"b_{n}", (size,))
        self.weights = w
        return self

    def load_state_dict(self, state_dict, prefix=""):
        """d2l's MultiHeadAttention.state_dict() or torch.nn.MultiheadAttention's."""
        return self.load_weights(**mha_from_state_dict(state_dict, prefix))

    @classmethod
    def from_torch(cls, module, **kwargs):
        """A clattn module with the weights of d2l's MultiHeadAttention or of
        torch.nn.MultiheadAttention (inputs are then batch-first (B, T, E) whatever its
        batch_first says; its weights returned per head, as average_attn_weights=False)."""
        if getattr(module, "add_zero_attn", False):
            raise ValueError("module: add_zero_attn=True appends a zero key and value to every "
                             "sequence; clattn has no such option")
        sd = module.state_dict()
        if hasattr(module, "in_proj_bias") or "in_proj_weight" in sd or "q_proj_weight" in sd:
            hidden, p = module.embed_dim, module.dropout
        else:
            hidden, p = sd["W_q.weight"].shape[0], module.attention.dropout.p
        kwargs.setdefault("bias", any(k.endswith("bias") for k in sd))
        self = cls(hidden, module.num_heads, p, **kwargs)
        self.load_state_dict(sd)
        self.training = module.training
        return self

    def _init(self, q_size, k_size, v_size):
        rng = np.random.default_rng(self.init_seed)
        h = self.num_hiddens
        kv = h // self.num_heads * (self.num_kv_heads or self.num_heads) if self.num_heads else h
        w = {"W_q": _lazy_linear(rng, h, q_size), "W_k": _lazy_linear(rng, kv, k_size),
             "W_v": _lazy_linear(rng, kv, v_size), "W_o": _lazy_linear(rng, h, h)}
        if self.bias:
            for n, size, fan_in in (("q", h, q_size), ("k", kv, k_size), ("v", kv, v_size),
                                    ("o", h, h)):
                bound = 1.0 / math.sqrt(fan_in)
                w[f"b_{n}"] = rng.uniform(-bound, bound, size).astype(np.float32)
        self.load_weights(**w)

    def forward(self, queries, keys, values, valid_lens=None, **kwargs):
        if self.weights is None:
            self._init(np.shape(queries)[-1], np.shape(keys)[-1], np.shape(values)[-1])
        queries, keys, values, valid_lens, kwargs = self._hold(queries, keys, values,
                                                               valid_lens, kwargs)
        drop = self._dropout()
        res = F.multihead_attention(queries, keys, values, self.num_heads, valid_lens=valid_lens,
                                    num_kv_heads=self.num_kv_heads,
                                    need_weights=self.need_weights, need_saved=self.training,
                                    ctx=self.ctx, **self.weights, **drop, **kwargs)
        res = list(res) if isinstance(res, tuple) else [res]
        out = res.pop(0)
        self.attention_weights = res.pop(0) if self.need_weights else None
        saved = res.pop(0) if self.training else None
        weights, ctx, heads, kv_heads = dict(self.weights), self.ctx, self.num_heads, \
            self.num_kv_heads  # no self: see DotProductAttention.forward
        self._backward = lambda dout: F.multihead_attention_backward(
            queries, keys, values, dout, heads, valid_lens=valid_lens, num_kv_heads=kv_heads,
            saved=saved, ctx=ctx, **weights, **drop, **_backward_kwargs(kwargs))
        return out
