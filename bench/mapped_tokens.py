#!/usr/bin/env python3
"""Peak resident memory per rank of a 2-rank gpt job on a large token file
against the same job on a small one: the "tokens" files are memory-mapped, so
the corpus's size should not show in a rank's memory.

Writes a raw uint16 corpus of --tokens ids (default 900M, 1.8 GB) and one of
--small-tokens (default 500K, 1 MB), random 16-bit words (a vocabulary of
65536), and a small test file both jobs share. Runs each job under basin-run --nproc 2,
one thread per rank, each rank under a wrapper that prints its peak RSS
(getrusage's ru_maxrss: file pages included, as top shows them), and prints
the peaks, their difference and the jobs' wall times.

Usage: python3 bench/mapped_tokens.py [--build build-torch-2.11.0] [--dir /tmp/basin-mapped]
(the files are kept in --dir for another round; delete them after).
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


def write_ids(path, count):
    """`count` uniform uint16 ids (a vocabulary of 65536): random bytes, written a chunk at a time."""
    if os.path.exists(path) and os.path.getsize(path) == 2 * count:
        return
    chunk = 1 << 24
    with open(path, "wb") as out:
        for first in range(0, count, chunk):
            out.write(os.urandom(2 * min(chunk, count - first)))


def run_job(args, train, name):
    config = {
        "seed": 1, "threads": 1, "max_steps": args.steps, "max_epochs": 1, "log_every": args.steps,
        "data": {"name": "tokens", "train": train, "test": os.path.join(args.dir, "test.bin"),
                 "dtype": "uint16", "vocab_size": 65536, "block_size": args.block, "batch_size": 2},
        "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64},
        "optimizer": {"name": "adamw", "lr": 0.001},
        "algorithms": {"sam": {"rho": 0.05}},
        "parallel": {"mode": "ddp", "timeout_seconds": 300},
    }
    config_path = os.path.join(args.dir, name + ".json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    wrapper = os.path.join(args.dir, "peak_rss.py")
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    command = [os.path.join(args.build, "programs", "basin-run"), "--nproc", "2", "--",
               sys.executable, wrapper, os.path.join(args.build, "programs", "basin-train"),
               "--config", config_path, "--run-dir", os.path.join(args.dir, "run-" + name), "--overwrite"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.monotonic()
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"{name}: basin-run failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    peaks = [float(m) for m in re.findall(r"peak_rss_mib rank=\d+ ([0-9.]+)", out.stdout + out.stderr)]
    if len(peaks) != 2:
        sys.exit(f"{name}: expected two ranks' peaks in:\n{out.stdout}\n{out.stderr}")
    return peaks, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build-torch-2.11.0")
    parser.add_argument("--dir", default="/tmp/basin-mapped")
    parser.add_argument("--tokens", type=int, default=900_000_000)
    parser.add_argument("--small-tokens", type=int, default=500_000)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for name, count in (("large.bin", args.tokens), ("small.bin", args.small_tokens), ("test.bin", 20_000)):
        start = time.monotonic()
        write_ids(os.path.join(args.dir, name), count)
        print(f"{name}: {count} ids ({2 * count / 1e9:.3f} GB), ready in {time.monotonic() - start:.1f} s", flush=True)
    small, small_wall = run_job(args, os.path.join(args.dir, "small.bin"), "small")
    large, large_wall = run_job(args, os.path.join(args.dir, "large.bin"), "large")
    print(f"small file: peak RSS per rank {small[0]:.0f} / {small[1]:.0f} MiB, job {small_wall:.1f} s")
    print(f"large file: peak RSS per rank {large[0]:.0f} / {large[1]:.0f} MiB, job {large_wall:.1f} s")
    gaps = [l - s for l, s in zip(sorted(large), sorted(small))]
    print(f"large minus small, rank by rank (sorted): {', '.join(f'{g:+.0f}' for g in gaps)} MiB; "
          f"the job {large_wall - small_wall:+.1f} s")


if __name__ == "__main__":
    main()
