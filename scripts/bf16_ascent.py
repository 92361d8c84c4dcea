"""How much of SAM's perturbation a bf16 ascent point keeps, on the benchmark
GPT (bench/gpt_peer_model.py, GPT-2's init, 44.7M parameters).

Under amp_bf16, with fp32 gathers (autocast rounds each weight) or bf16
gathers (the gather rounds each shard), the descent's gradient is taken at
bf16(w + e), not at w + e: the step the model sees is bf16(w + e) - bf16(w).
This prints, for e = rho g / ||g|| at a random batch, the share of e's norm
that step keeps, its cosine with e, and the share of elements it leaves
where they were. Run with PyPI's torch (any recent one):

    python scripts/bf16_ascent.py [--rho 0.05] [--batch 4] [--seed 0]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from gpt_peer_model import BLOCK, VOCAB, Gpt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rho", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = Gpt()
    ids = torch.randint(0, VOCAB, (args.batch, BLOCK + 1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
    F.cross_entropy(logits.float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1)).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum(p.grad.float().pow(2).sum() for p in params))
    kept = total = dot = unmoved = count = 0.0
    for p in params:
        e = args.rho * p.grad / norm
        step = (p.detach() + e).bfloat16().float() - p.detach().bfloat16().float()
        kept += step.pow(2).sum().item()
        total += e.pow(2).sum().item()
        dot += (step * e).sum().item()
        unmoved += (step == 0).sum().item()
        count += e.numel()
    print(f"rho {args.rho}: |bf16 step| / |e| = {kept ** 0.5 / total ** 0.5:.3f}, "
          f"cos(bf16 step, e) = {dot / (kept ** 0.5 * total ** 0.5):.3f}, "
          f"elements left where they were: {100 * unmoved / count:.1f}%")


if __name__ == "__main__":
    main()
