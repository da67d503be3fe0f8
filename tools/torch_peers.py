#!/usr/bin/env python3
"""PyTorch peers for clattn-bench (BENCHMARKS.md): the same shapes, timed the same way.

Prints one JSON object per line: {"name": ..., "ms": median, "reps": n}. Run it right before or
after the matching `clattn-bench --only ...` so both see the same machine state.

    torch_peers.py [REPS] [--only SECTIONS]     SECTIONS: additive,mha,unfused,sdpa,gqa,decode,
                                                varlen,bias,loss,backward

PyTorch 2.x (python3 -m venv /tmp/torch2 && /tmp/torch2/bin/pip install torch numpy), CPU, float32,
as many threads as the machine has cores. sdpa, gqa and decode use
torch.nn.functional.scaled_dot_product_attention, whose CPU path is a flash kernel; gqa and decode
pass enable_gqa=True (torch >= 2.5); decode attends one new query row over a full cache.
"""
import json
import math
import os
import statistics
import sys
import time

import warnings

import torch
from torch import nn

from d2l_torch import AdditiveAttention, MaskedSoftmaxCELoss  # noqa: E402 (beside this script)


def median_ms(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_additive(reps):
    B, Q, K, h, size = 4, 256, 256, 64, 64
    net = AdditiveAttention(h, 0.0).eval()
    q, k, v = torch.randn(B, Q, size), torch.randn(B, K, size), torch.randn(B, K, size)
    lens = torch.randint(1, K + 1, (B,))
    with torch.no_grad():
        net(q, k, v, lens)
        return median_ms(lambda: net(q, k, v, lens), reps)


def bench_mha(reps):
    B, H, N, E = 4, 8, 512, 512
    net = nn.MultiheadAttention(E, H, batch_first=True).eval()  # bias=False trips torch 1.13
    x = torch.randn(B, N, E)
    with torch.no_grad():
        return median_ms(lambda: net(x, x, x, need_weights=False), reps)


def bench_mha_train(reps):
    """clattn-bench's mha fwd+bwd row: nn.MultiheadAttention forward and backward (self-attention,
    every parameter's gradient and the input's)."""
    B, H, N, E = 4, 8, 512, 512
    net = nn.MultiheadAttention(E, H, batch_first=True).train()
    x = torch.randn(B, N, E, requires_grad=True)
    dout = torch.randn(B, N, E)

    def run():
        net.zero_grad(set_to_none=True)
        x.grad = None
        out, _ = net(x, x, x, need_weights=False)
        out.backward(dout)

    return median_ms(run, reps)


def bench_unfused_attention(reps, n=1024, heads=16, d=64):
    q, k, v = (torch.randn(heads, n, d) for _ in range(3))
    scale = 1 / math.sqrt(d)

    def run():
        w = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * scale, dim=-1)
        return torch.bmm(w, v)

    with torch.no_grad():
        return median_ms(run, reps)


def sdpa():
    return torch.nn.functional.scaled_dot_product_attention


def bench_sdpa(reps, n=1024, heads=16, d=64, causal=False):
    """clattn-bench's attention section: (1, H, N, d), plain or causal (top-left)."""
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    with torch.no_grad():
        return median_ms(lambda: sdpa()(q, k, v, is_causal=causal), reps)


def bench_gqa(reps, n=2048, causal=True):
    """clattn-bench's gqa section: B 1, 32 query heads over 8 K/V heads, d 128."""
    q = torch.randn(1, 32, n, 128)
    k, v = torch.randn(1, 8, n, 128), torch.randn(1, 8, n, 128)
    with torch.no_grad():
        return median_ms(lambda: sdpa()(q, k, v, is_causal=causal, enable_gqa=True), reps)


def bench_decode(reps, B, K):
    """clattn-bench's decode section: one new row, 32 query heads over 8 K/V heads, d 128, over
    full caches of K keys (no mask: the one row sees every key)."""
    q = torch.randn(B, 32, 1, 128)
    k, v = torch.randn(B, 8, K, 128), torch.randn(B, 8, K, 128)
    with torch.no_grad():
        return median_ms(lambda: sdpa()(q, k, v, enable_gqa=True), reps)


def bench_bias(reps, n=1024, heads=16, d=64):
    """clattn-bench's bias section: SDPA with a float attn_mask (N, N) shared by the heads, and
    ALiBi as torch users write it, a float (H, N, N) bias -slope_h |i - j| built once."""
    q, k, v = (torch.randn(1, heads, n, d) for _ in range(3))
    rel = torch.zeros(n, n)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
    pos = torch.arange(n)
    alibi = -slopes[:, None, None] * (pos[:, None] - pos[None, :]).abs()[None].float()
    with torch.no_grad():
        return [("torch_sdpa_bias_H16_N1024_d64", median_ms(
                    lambda: sdpa()(q, k, v, attn_mask=rel), reps)),
                ("torch_sdpa_alibi_tensor_H16_N1024_d64", median_ms(
                    lambda: sdpa()(q, k, v, attn_mask=alibi[None]), reps))]


VARLEN_LENS = (1024, 97, 512, 2048, 300, 64, 1500, 800)


def bench_varlen(reps, heads=16, d=64):
    """clattn-bench's varlen section: 8 sequences, causal. torch has no packed varlen SDPA on the
    CPU; its users loop over the sequences (one SDPA each, no padding computed) or pad to the
    longest and pass a boolean mask (causal and each sequence's keys)."""
    seqs = [tuple(torch.randn(1, heads, n, d) for _ in range(3)) for n in VARLEN_LENS]
    m = max(VARLEN_LENS)
    pad = [torch.zeros(len(VARLEN_LENS), heads, m, d) for _ in range(3)]
    for b, (q, k, v) in enumerate(seqs):
        for t, x in zip(pad, (q, k, v)):
            t[b, :, :x.shape[2]] = x[0]
    lens = torch.tensor(VARLEN_LENS)
    keep = torch.ones(m, m, dtype=torch.bool).tril()[None] & (torch.arange(m)[None, None, :] <
                                                              lens[:, None, None])
    keep = keep[:, None]  # (B, 1, m, m)
    with torch.no_grad():
        loop = median_ms(lambda: [sdpa()(q, k, v, is_causal=True) for q, k, v in seqs], reps)
        padded = median_ms(lambda: sdpa()(pad[0], pad[1], pad[2], attn_mask=keep), reps)
    return [("torch_sdpa_varlen_loop_B8_H16_d64_causal", loop),
            ("torch_sdpa_varlen_padded_mask_B8_H16_d64_causal", padded)]


def bench_loss(reps, B=64, T=32, V=10000):
    """clattn-bench's loss section: forward and backward (d2l's l.sum().backward())."""
    pred = (torch.rand(B, T, V) * 8 - 4).requires_grad_()
    label = torch.randint(0, V, (B, T))
    valid_len = torch.randint(1, T + 1, (B,))
    loss = MaskedSoftmaxCELoss()

    def run():
        pred.grad = None
        loss(pred, label, valid_len).sum().backward()

    return [("torch_d2l_masked_softmax_ce_fwd_bwd_B64_T32_V10000", median_ms(run, reps))]


def bench_sdpa_backward(reps, n, causal, heads=16, d=64):
    """clattn-bench's backward section: the backward alone of SDPA (1, H, N, d) under autograd,
    the graph kept from one forward."""
    q, k, v = (torch.randn(1, heads, n, d, requires_grad=True) for _ in range(3))
    out = sdpa()(q, k, v, is_causal=causal)
    dout = torch.randn_like(out)

    def run():
        q.grad = k.grad = v.grad = None
        out.backward(dout, retain_graph=True)

    return median_ms(run, reps)


SECTIONS = {
    "additive": lambda r: [("torch_additive_d2l_B4_Q256_K256_h64", bench_additive(r))],
    "mha": lambda r: [("torch_mha_B4_H8_N512_E512", bench_mha(r)),
                      ("torch_mha_B4_H8_N512_E512_fwd_bwd", bench_mha_train(r))],
    "unfused": lambda r: [("torch_attention_unfused_H16_N1024_d64", bench_unfused_attention(r))],
    "sdpa": lambda r: [("torch_sdpa_H16_N1024_d64", bench_sdpa(r)),
                       ("torch_sdpa_H16_N1024_d64_causal", bench_sdpa(r, causal=True))],
    "gqa": lambda r: [("torch_sdpa_gqa_B1_Hq32_Hkv8_N2048_d128_causal", bench_gqa(r)),
                      ("torch_sdpa_gqa_B1_Hq32_Hkv8_N2048_d128", bench_gqa(r, causal=False))],
    "decode": lambda r: [("torch_sdpa_decode_B%d_K%d" % (b, k), bench_decode(r, b, k))
                         for b in (1, 8) for k in (4096, 32768)],
    "varlen": bench_varlen,
    "bias": bench_bias,
    "loss": bench_loss,
    "backward": lambda r: [("torch_sdpa_backward_H16_N%d_d64%s" % (n, "_causal" if c else ""),
                            bench_sdpa_backward(r, n, c))
                           for n in (1024, 2048) for c in (False, True)],
}


def main():
    warnings.filterwarnings("ignore", message="Lazy modules")
    args = sys.argv[1:]
    only = ["additive", "mha", "unfused"]
    if "--only" in args:
        i = args.index("--only")
        only = args[i + 1].split(",")
        del args[i:i + 2]
    for name in only:
        if name not in SECTIONS:
            sys.exit("torch_peers.py: unknown section %r (%s)" % (name, ", ".join(SECTIONS)))
    reps = int(args[0]) if args else 10
    torch.set_num_threads(os.cpu_count() or 1)
    results = [row for name in only for row in SECTIONS[name](reps)]
    for name, ms in results:
        print(json.dumps({"name": name, "ms": round(ms, 3), "reps": reps,
                          "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
