"""What users would run instead of bench/attention_bench.cpp: PyTorch's
scaled_dot_product_attention on the same LibTorch (PyPI's), forward and
backward of q, k and v [1, 8, T, 64] fp32, one thread, full causal
(is_causal) and a window as transformers' sdpa path runs it (the whole
T x T boolean mask). Prints the median ms of each over --rounds.

    $(BASIN_LIBTORCH=pypi bash scripts/libtorch.sh --python) bench/attention_peer.py
"""
import argparse
import statistics
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=15)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


def step_ms(t, window):
    q, k, v = (torch.randn(1, 8, t, 64, requires_grad=True) for _ in range(3))
    position = torch.arange(t)
    visible = (position[None, :] <= position[:, None]) & (position[None, :] > position[:, None] - window)
    times = []
    for _ in range(args.rounds + 2):
        start = time.perf_counter()
        if window == 0:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        y.sum().backward()
        q.grad = k.grad = v.grad = None
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[2:])


for t, window in ((2048, 0), (2048, 512), (2048, 128), (512, 0), (512, 128)):
    print(f"torch sdpa T={t} window={window}: {step_ms(t, window):.1f} ms")
