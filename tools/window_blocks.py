#!/usr/bin/env python3
"""Key blocks flash_cpu computes for a sliding window against full causal attention.

A model of kernels/flash.cl's block walk, not a timing: a work-item owns QG groups of QR rows,
and each group computes the key blocks of KB keys from the one holding its lowest open key to the
one holding its last (the blocks wholly below its rows' windows are skipped). The ratio of blocks
is the most a window can gain over full causal with those tiles if every block costs the same;
the per-key ratio is the ideal with no tiles at all. The sub-blocks line models a kernel
that also skips the SUB-key sub-blocks at both ends of each group's keys that none of its rows
sees (flash_cpu since d208878, in Q K^T and P V). The last two lines bound any kernel whose
vectors hold 8 or 16 consecutive keys, however it groups rows: a row's window of W + 1 keys
(W a multiple of 16) touches W / 16 + 1 parts of 16 keys at any alignment, so 528 keys are
computed for its 513. Usage: window_blocks.py [N] [WINDOW] [SUB] (8192 512 16)."""
import sys


def item_spans(n, window, qr, qg):
    """For each work-item, its groups' (lowest open key, last open key + 1); window < 0: full
    causal (top-left, Q = K = n)."""
    rows_per_item = qr * qg
    for item in range((n + rows_per_item - 1) // rows_per_item):
        spans = []
        for g in range(qg):
            rows = [min((item * qg + g) * qr + r, n - 1) for r in range(qr)]
            lo = min(max(0, q - window) if window >= 0 else 0 for q in rows)
            spans.append((lo, max(q + 1 for q in rows)))
        yield spans


def blocks(n, window, qr, kb, qg):
    """Blocks computed over all groups."""
    return sum((limit - 1) // kb - lo // kb + 1
               for spans in item_spans(n, window, qr, qg) for lo, limit in spans)


def sub_blocks(n, window, qr, kb, qg, sub):
    """Keys computed over all groups in units of kb when each group computes only the sub-blocks of
    sub keys from the one holding its lowest open key to the one holding its last."""
    return sum((-(-limit // sub) - lo // sub) * sub / kb
               for spans in item_spans(n, window, qr, qg) for lo, limit in spans)


def row_parts(n, window, sub):
    """Keys computed when every row computes only the sub-key parts its own keys touch: the least
    any kernel computes whose vectors hold sub consecutive keys (a group of rows only adds to it)."""
    return sum(sub * (q // sub - (max(0, q - window) if window >= 0 else 0) // sub + 1)
               for q in range(n))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    keys_causal = n * (n + 1) // 2
    keys_window = sum(min(i, window) + 1 for i in range(n))
    print(f"N {n}, window {window}: per-key ratio {keys_causal / keys_window:.2f}")
    # the tiles tuning.c picks: AVX2 (QR=6:KB=16), the default (QR=5:KB=64; QG=8 on Intel's), and
    # between
    for qr, kb, qg in [(6, 16, 2), (5, 16, 2), (5, 32, 2), (5, 64, 2), (5, 64, 8)]:
        c, w = blocks(n, -1, qr, kb, qg), blocks(n, window, qr, kb, qg)
        print(f"QR={qr} KB={kb} QG={qg}: blocks causal {c}, window {w}, ratio {c / w:.2f}")
    sub = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    c, w = sub_blocks(n, -1, 5, 64, 2, sub), sub_blocks(n, window, 5, 64, 2, sub)
    print(f"QR=5 KB=64 QG=2, sub-blocks of {sub} skipped at both ends: ratio {c / w:.2f}")
    for lanes in (8, 16):
        c, w = row_parts(n, -1, lanes), row_parts(n, window, lanes)
        print(f"any kernel with {lanes} keys per vector, each row its own parts: ratio {c / w:.2f}")


if __name__ == "__main__":
    main()
