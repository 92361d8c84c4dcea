#!/usr/bin/env python3
"""basin's data-parallel step against PyTorch DDP's, side by side, round
after round (bench/ddp_peers.sh sets it up). Each case (ranks, model,
global batch, algorithm) runs three contenders in turn, in an order that
rotates each round, every one as a job of N processes under basin-run:

  basin          basin's trainer, its gradient sync overlapping backward
  basin_after    the same with "overlap": false (every bucket after backward)
  pytorch_ddp    bench/ddp_peer.py: PyTorch DDP over Gloo, Debian's python3-torch

and reports, per case, the median over rounds of the per-round ratios
basin / pytorch_ddp and basin / basin_after (with their range): the machine's
speed drifts between rounds, not within one.

Usage: ddp_peers.py --step-timer BUILD/bench/basin-bench-step --launcher BUILD/programs/basin-run
"""

import argparse
import os
import statistics
import sys

import peers  # bench/peers.py: runs a contender (malloc tuned as basin's programs tune it)

HERE = os.path.dirname(os.path.abspath(__file__))
# (ranks, model, global batch): the MLP and the resnet at 2 and 4 ranks, and
# the wide MLP at a small batch, where communication is a large part of the step.
CASES = ((2, "mlp1024", 256), (4, "mlp1024", 256), (2, "resnet", 128), (4, "resnet", 128), (2, "mlp2048", 32))
ALGORITHMS = ("sgd", "sam_local", "sam_synced")


def run(command):
    return peers.run(command, prefix="[rank 0] peer ")  # basin-run prefixes each rank's lines


def contenders(args, ranks, model, batch, algorithm):
    common = ["--model", model, "--batch", str(batch), "--steps", str(args.steps), "--threads", "1"]
    launch = [args.launcher, "--nproc", str(ranks), "--"]
    impl = "trainer_sgd" if algorithm == "sgd" else "trainer_sam"
    basin = launch + [args.step_timer, "--impl", impl, "--parallel", "ddp",
                      "--sync-ascent", "1" if algorithm == "sam_synced" else "0"] + common
    return [("basin", basin + ["--overlap", "1"]), ("basin_after", basin + ["--overlap", "0"]),
            ("pytorch_ddp", launch + [args.python, os.path.join(HERE, "ddp_peer.py"), "--algorithm", algorithm] + common)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-timer", required=True)
    parser.add_argument("--launcher", required=True)
    parser.add_argument("--python", default="/usr/bin/python3", help="a Python with the torch basin builds against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cases", default="all", help="indices into CASES, comma-separated, or all")
    args = parser.parse_args()

    cases = CASES if args.cases == "all" else [CASES[int(i)] for i in args.cases.split(",")]
    versions = set()
    print(f"{'ranks':>5} {'model':<8} {'batch':>5} {'algorithm':<10} {'basin ms':>9} {'ddp ms':>8} "
          f"{'basin/ddp (min-max)':>22} {'overlap/after (min-max)':>25}")
    for ranks, model, global_batch in cases:
        for algorithm in ALGORITHMS:
            rounds = []
            entries = contenders(args, ranks, model, global_batch // ranks, algorithm)
            for r in range(args.rounds):
                shift = r % len(entries)
                times = {}
                for name, command in entries[shift:] + entries[:shift]:
                    times[name], version = run(command)
                    versions.add(version)
                rounds.append(times)
                print(f"[{ranks} {model} {algorithm} round {r + 1}] " +
                      " ".join(f"{k}={v:.2f}ms" for k, v in sorted(times.items())), file=sys.stderr, flush=True)
            vs_ddp = [t["basin"] / t["pytorch_ddp"] for t in rounds]
            vs_after = [t["basin"] / t["basin_after"] for t in rounds]
            print(f"{ranks:>5} {model:<8} {global_batch:>5} {algorithm:<10} "
                  f"{statistics.median(t['basin'] for t in rounds):>9.2f} "
                  f"{statistics.median(t['pytorch_ddp'] for t in rounds):>8.2f} "
                  f"{statistics.median(vs_ddp):>8.3f} ({min(vs_ddp):.3f}-{max(vs_ddp):.3f}) "
                  f"{statistics.median(vs_after):>11.3f} ({min(vs_after):.3f}-{max(vs_after):.3f})", flush=True)
    print(f"\nLibTorch: {', '.join(sorted(versions))}; one thread per rank; {args.rounds} rounds of {args.steps} "
          f"timed steps; batch is global (each rank takes batch/ranks)")


if __name__ == "__main__":
    main()
