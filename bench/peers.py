#!/usr/bin/env python3
"""Runs basin's step timer and the Python peers in turn, round after round,
and reports basin's time over each peer's, pair by pair within a round (the
machine's speed drifts between rounds, not within one).

Usage (bench/peers.sh sets it up): peers.py --step-timer BUILD/bench/basin-bench-step
"""

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BASIN = ("trainer_sgd", "trainer_sam", "optimizer_sgd", "optimizer_sam")
PYTHON = ("sgd", "eager_sam", "pytorch_optimizer_sam")
# (numerator, denominator, what it says): ratios of medians from the same round.
RATIOS = (
    ("trainer_sgd", "sgd", "basin SGD through the trainer / eager Python SGD"),
    ("optimizer_sgd", "sgd", "basin's SGD alone / eager Python SGD"),
    ("trainer_sam", "eager_sam", "basin SAM through the trainer / eager Python SAM"),
    ("optimizer_sam", "eager_sam", "basin SAMOptimizer alone / eager Python SAM"),
    ("trainer_sam", "pytorch_optimizer_sam", "basin SAM through the trainer / pytorch-optimizer SAM"),
    ("optimizer_sam", "pytorch_optimizer_sam", "basin SAMOptimizer alone / pytorch-optimizer SAM"),
    ("trainer_sam", "trainer_sgd", "SAM / SGD through basin's trainer"),
    ("optimizer_sam", "optimizer_sgd", "SAM / SGD, basin's optimizers alone"),
    ("eager_sam", "sgd", "SAM / SGD, eager Python"),
    # The cnn only: Python with the model and inputs in channels-last, as basin's cnn convolves.
    ("trainer_sgd", "sgd_channels_last", "basin SGD through the trainer / eager Python SGD, channels-last"),
    ("trainer_sam", "eager_sam_channels_last", "basin SAM through the trainer / eager Python SAM, channels-last"),
)


# basin's programs make malloc keep freed memory for reuse (core/base/memory_reuse.h);
# the Python peers get the same through glibc's tunables, so all run alike.
PEER_ENV = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824")


def run(command, prefix="peer "):
    """The median step time and LibTorch version of the first output line starting with `prefix`."""
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=PEER_ENV).stdout
    line = next(l for l in out.splitlines() if l.startswith(prefix))
    fields = dict(f.split("=", 1) for f in line[len(prefix):].split())
    return float(fields["median_ms"]), fields["torch"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-timer", required=True, help="basin-bench-step of the build to measure")
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    common = ["--batch", str(args.batch), "--steps", str(args.steps), "--threads", str(args.threads)]
    versions = set()
    for model in args.models.split(","):
        rounds = []
        for r in range(args.rounds):
            times = {}
            contenders = [(impl, [args.step_timer, "--impl", impl, "--model", model]) for impl in BASIN] + [
                (impl, [sys.executable, os.path.join(HERE, "peers_sam.py"), "--impl", impl, "--model", model])
                for impl in PYTHON]
            if model == "cnn":
                contenders += [(impl + "_channels_last", [sys.executable, os.path.join(HERE, "peers_sam.py"), "--impl", impl,
                                                          "--model", "cnn_channels_last"]) for impl in ("sgd", "eager_sam")]
            # Rotate the order each round, so no contender always runs first.
            shift = r % len(contenders)
            for impl, command in contenders[shift:] + contenders[:shift]:
                times[impl], version = run(command + common)
                versions.add(version)
            rounds.append(times)
            print(f"[{model} round {r + 1}/{args.rounds}] " +
                  " ".join(f"{k}={v:.2f}ms" for k, v in sorted(times.items())), file=sys.stderr, flush=True)
        print(f"\n{model}, batch {args.batch}, {args.threads} thread(s), median over {args.rounds} rounds "
              f"of the per-round ratio (min-max)")
        for impl in sorted(rounds[0]):
            print(f"  {impl:<24} {statistics.median(t[impl] for t in rounds):8.2f} ms per step")
        for num, den, text in RATIOS:
            if den not in rounds[0]:
                continue
            ratios = [t[num] / t[den] for t in rounds]
            print(f"  {text:<66} {statistics.median(ratios):6.3f}  ({min(ratios):.3f}-{max(ratios):.3f})")
    print(f"\nLibTorch: {', '.join(sorted(versions))}; every contender with {PEER_ENV['GLIBC_TUNABLES']}")


if __name__ == "__main__":
    main()
