#!/usr/bin/env python3
"""Peak resident memory per rank of a zero3 job resumed at another world size
(--reshard) against the same job started afresh at that size: a resuming rank
reads only its rows of the checkpoint, a tensor at a time, so its peak should
be its steady training peak plus at most one parameter with its state.

Saves a 2-rank zero3 checkpoint of a GPT (default GPT-2 medium: 24 x 1024,
vocabulary 50257, block 128; AdamW, SAM) after one step, then for each world
size in --worlds (default 1 and 4) runs one step afresh and one step resumed
from that checkpoint, under basin-run, one thread per rank, each rank under
a wrapper that prints its peak RSS (getrusage's ru_maxrss: file pages
included, as top shows them). Prints the peaks side by side, the largest
gap, and the bytes of the largest parameter with AdamW's two moments.

Usage: python3 bench/resharding.py [--build build-torch-2.11.0] [--dir /tmp/basin-resharding]
       [--layers 24 --heads 16 --width 1024] [--worlds 1 4] [--reuse]
(the checkpoint stays in --dir; delete it after).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

WRAPPER = ("import resource, subprocess, sys\n"
           "code = subprocess.call(sys.argv[1:])\n"
           "rank = __import__('os').environ.get('RANK', '?')\n"
           "print(f'peak_rss_mib rank={rank} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.1f}', flush=True)\n"
           "sys.exit(code)\n")
VOCAB = 50257


def config(args, steps, checkpoints):
    cfg = {
        "seed": 1, "threads": 1, "max_steps": steps, "max_epochs": 1, "log_every": 1,
        "data": {"name": "tokens", "train": os.path.join(args.dir, "train.bin"),
                 "test": os.path.join(args.dir, "test.bin"), "dtype": "uint16", "vocab_size": VOCAB,
                 "block_size": args.block, "batch_size": 2},
        "model": {"name": "gpt", "n_layer": args.layers, "n_head": args.heads, "n_embd": args.width},
        "optimizer": {"name": "adamw", "lr": 0.0001},
        "algorithms": {"sam": {"rho": 0.05}},
        "parallel": {"mode": "zero3", "timeout_seconds": 1200},
    }
    if checkpoints:
        cfg["callbacks"] = {"checkpoint": {"every_steps": 1, "every_epochs": 0}}
    return cfg


def run_job(args, name, ranks, cfg, extra=()):
    path = os.path.join(args.dir, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    wrapper = os.path.join(args.dir, "peak_rss.py")
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    command = [os.path.join(args.build, "programs", "basin-run"), "--nproc", str(ranks), "--",
               sys.executable, wrapper, os.path.join(args.build, "programs", "basin-train"),
               "--config", path, "--run-dir", os.path.join(args.dir, "run-" + name), "--overwrite", *extra]
    start = time.monotonic()
    out = subprocess.run(command, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    wall = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"{name}: basin-run failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    peaks = [float(m) for m in re.findall(r"peak_rss_mib rank=\d+ ([0-9.]+)", out.stdout + out.stderr)]
    if len(peaks) != ranks:
        sys.exit(f"{name}: expected {ranks} ranks' peaks in:\n{out.stdout}\n{out.stderr}")
    print(f"{name}: peak RSS per rank {' / '.join(f'{p:.0f}' for p in peaks)} MiB, {wall:.1f} s", flush=True)
    return sorted(peaks), wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build-torch-2.11.0")
    parser.add_argument("--dir", default="/tmp/basin-resharding")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--reuse", action="store_true", help="keep --dir's data and checkpoint from an earlier round")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for name, count in ((n, c) for n, c in (("train.bin", 200_000), ("test.bin", 4_000))
                        if not (args.reuse and os.path.exists(os.path.join(args.dir, n)))):
        with open(os.path.join(args.dir, name), "wb") as out:  # ids below the vocabulary, little-endian uint16
            out.write(b"".join((int.from_bytes(os.urandom(2), "little") % VOCAB).to_bytes(2, "little")
                               for _ in range(count)))
    manifest = os.path.join(args.dir, "run-save-2", "checkpoints", "step-000000000001.pt")
    if args.reuse and os.path.exists(manifest + ".sum"):
        print(f"reusing the checkpoint {manifest}")
    else:
        run_job(args, "save-2", 2, config(args, 1, checkpoints=True))
    files = [manifest] + [manifest.replace(".pt", f".rank-{r}.pt") for r in range(2)]
    print(f"checkpoint: {sum(os.path.getsize(f) for f in files) / 2**20:.0f} MiB in the manifest and 2 rank files")
    largest = VOCAB * args.width * 4 * 3  # the tied embedding, with AdamW's exp_avg and exp_avg_sq
    print(f"largest parameter with its state: {largest / 2**20:.0f} MiB")
    for world in args.worlds:
        fresh, _ = run_job(args, f"fresh-{world}", world, config(args, 1, checkpoints=False))
        resumed, _ = run_job(args, f"resumed-{world}", world, config(args, 2, checkpoints=False),
                             ("--resume", manifest, "--reshard"))
        gaps = [r - f for r, f in zip(resumed, fresh)]
        print(f"{world} rank(s): resumed minus fresh, rank by rank (sorted): "
              f"{', '.join(f'{g:+.0f}' for g in gaps)} MiB (largest parameter with its state: {largest / 2**20:.0f} MiB)",
              flush=True)


if __name__ == "__main__":
    main()
