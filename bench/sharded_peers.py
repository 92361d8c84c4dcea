#!/usr/bin/env python3
"""basin's ddp and zero3 SAM steps against PyTorch DDP's and FSDP2's, side by
side, round after round, on the same LibTorch (bench/sharded_peers.sh sets it
up on PyPI's torch). For each world size, four contenders (two with --pairs
zero3, two more with hsdp) run in turn, in an order that rotates each round, every one as a job of
N processes under basin-run:

  basin_ddp     basin's trainer, parallel.mode ddp (gradient sync overlapping backward)
  pytorch_ddp   bench/ddp_peer.py: DistributedDataParallel
  basin_zero3   basin's trainer, parallel.mode zero3 (each Linear a unit)
  fsdp2         bench/fsdp_peer.py: fully_shard on each Linear, then the root
  basin_hsdp    basin's trainer, parallel.mode hsdp (--pairs hsdp; --shard-group-size, default half the ranks)
  fsdp2_hsdp    bench/fsdp_peer.py over a 2-D mesh (replicate x shard): FSDP2's HSDP

all with SAM's ascent synced, the same model, optimizer, batch per rank and
one thread per rank. It reports the median step time (rank 0's median over
its steps, then the median over rounds), every rank's peak resident memory
(the largest over rounds), and the per-round ratios basin_ddp / pytorch_ddp
and basin_zero3 / fsdp2 (median and range): the machine's speed drifts
between rounds, not within one. For the gpt and the llama (Hugging Face's
LlamaForCausalLM on the peers' side) it also gives tokens per second (the
job's: 128 tokens a sample, over every rank).

Usage: sharded_peers.py --step-timer BUILD/bench/basin-bench-step --launcher BUILD/programs/basin-run
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

from gpt_peer_model import BLOCK, SHAPES

HERE = os.path.dirname(os.path.abspath(__file__))
# basin's programs make malloc keep freed memory for reuse (core/base/memory_reuse.h); the peers get the same.
PEER_ENV = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824")
PAIRS = (("basin_ddp", "pytorch_ddp"), ("basin_zero3", "fsdp2"), ("basin_hsdp", "fsdp2_hsdp"))


def run(command, ranks, env):
    """{rank: fields} of each rank's 'peer ...' line (basin-run prefixes '[rank N] ')."""
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    lines = {}
    for line in out.splitlines():
        match = re.match(r"\[rank (\d+)\] peer (.*)", line)
        if match:
            lines[int(match.group(1))] = dict(f.split("=", 1) for f in match.group(2).split())
    if sorted(lines) != list(range(ranks)):
        sys.exit(f"sharded_peers: expected a line from each of {ranks} ranks, got {sorted(lines)} from {command}:\n{out}")
    return lines


def contenders(args, ranks):
    common = ["--model", args.model, "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
              str(args.warmup), "--threads", "1"]
    launch = [args.launcher, "--nproc", str(ranks), "--"]
    sam = args.algorithm == "sam_synced"
    basin = launch + [args.step_timer, "--impl", "trainer_sam" if sam else "trainer_sgd", "--sync-ascent", "1",
                      "--optimizer", args.optimizer] + common
    peer = ["--algorithm", "sam_synced" if sam else "sgd", "--optimizer", args.python_optimizer or args.optimizer] + common
    features = [f for f, on in (("--mixed-precision", args.mixed_precision), ("--checkpointing", args.checkpointing)) if on]
    basin_only = ["--return-freed-memory", "1"] if args.return_freed_memory else []
    peer_only = (["--autocast"] if args.peer_autocast else []) + (["--meta-init"] if args.peer_meta_init else [])
    pairs = args.pairs.split(",")
    entries = []
    if "ddp" in pairs:
        entries += [("basin_ddp", basin + ["--parallel", "ddp"]),
                    ("pytorch_ddp", launch + [args.python, os.path.join(HERE, "ddp_peer.py")] + peer)]
    if "zero3" in pairs:
        entries += [("basin_zero3", basin + ["--parallel", "zero3"] + [x for f in features for x in (f, "1")] + basin_only),
                    ("fsdp2", launch + [args.python, os.path.join(HERE, "fsdp_peer.py")] + peer + features + peer_only)]
    if "hsdp" in pairs:
        group = ["--shard-group-size", str(args.shard_group_size or max(1, ranks // 2))]
        entries += [("basin_hsdp", basin + ["--parallel", "hsdp"] + group + [x for f in features for x in (f, "1")] +
                     basin_only),
                    ("fsdp2_hsdp", launch + [args.python, os.path.join(HERE, "fsdp_peer.py")] + peer + features +
                     peer_only + group)]
    return entries


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-timer", required=True)
    parser.add_argument("--launcher", required=True)
    parser.add_argument("--python", default=sys.executable, help="a Python with the torch basin builds against")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--model", default="mlp4096x3")
    parser.add_argument("--optimizer", default="adam", help="basin's: adam, adamw (fused), adam_libtorch or sgd")
    parser.add_argument("--python-optimizer",
                        help="the peers' (default --optimizer): adam, adamw, adam_fused, adamw_fused (fused=True) or sgd")
    parser.add_argument("--algorithm", choices=("sam_synced", "base"), default="sam_synced",
                        help="SAM with a synced ascent, or the base optimizer alone")
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    parser.add_argument("--pairs", default="ddp,zero3",
                        help="which pairs run: ddp (basin_ddp, pytorch_ddp), zero3 (basin_zero3, fsdp2), "
                             "hsdp (basin_hsdp, fsdp2_hsdp: FSDP2 over a 2-D mesh)")
    parser.add_argument("--shard-group-size", type=int, default=0,
                        help="hsdp pair: the ranks of a shard group (default: half the ranks)")
    parser.add_argument("--mixed-precision", action="store_true",
                        help="zero3 and hsdp pairs only: basin's amp_bf16 with bf16 gathers; FSDP2's MixedPrecisionPolicy(bf16, fp32)")
    parser.add_argument("--checkpointing", action="store_true",
                        help="zero3 pair only: every unit's activations recomputed in backward, on both sides")
    parser.add_argument("--return-freed-memory", action="store_true",
                        help="zero3 and hsdp pairs: basin hands the heap's freed pages back before each backward "
                             "(parallel.return_freed_memory)")
    parser.add_argument("--peer-meta-init", action="store_true",
                        help="zero3 and hsdp pairs, gpt models: FSDP2 builds the model on the meta device and "
                             "initialises its shards alone (deferred init)")
    parser.add_argument("--peer-default-malloc", action="store_true",
                        help="the peers run with glibc's default malloc, not with basin's tunables")
    parser.add_argument("--peer-autocast", action="store_true",
                        help="zero3 pair only: FSDP2's forward under CPU autocast to bf16, as nanoGPT's loop runs it "
                             "(basin's amp_bf16 numerics)")
    args = parser.parse_args()
    if not set(args.pairs.split(",")) <= {"ddp", "zero3", "hsdp"} or not args.pairs:
        parser.error(f"--pairs {args.pairs!r}: expected ddp, zero3 or hsdp, comma-separated")
    if (args.mixed_precision or args.checkpointing or args.peer_autocast or args.peer_meta_init) and \
            "ddp" in args.pairs.split(","):
        parser.error("--mixed-precision, --checkpointing, --peer-autocast and --peer-meta-init are for the zero3 and "
                     "hsdp pairs: add --pairs zero3 or hsdp")

    versions = set()
    for ranks in (int(r) for r in args.ranks.split(",")):
        entries = contenders(args, ranks)
        rounds = []
        peak = {name: [0.0] * ranks for name, _ in entries}
        for r in range(args.rounds):
            shift = r % len(entries)
            times = {}
            for name, command in entries[shift:] + entries[:shift]:
                peer = not name.startswith("basin_")
                lines = run(command, ranks, dict(os.environ) if peer and args.peer_default_malloc else PEER_ENV)
                times[name] = float(lines[0]["median_ms"])
                versions.add(lines[0]["torch"])
                for rank, fields in lines.items():
                    peak[name][rank] = max(peak[name][rank], float(fields["peak_rss_mib"]))
            rounds.append(times)
            print(f"[{ranks} ranks, round {r + 1}/{args.rounds}] " +
                  " ".join(f"{k}={v:.0f}ms" for k, v in sorted(times.items())), file=sys.stderr, flush=True)
        what = "SAM with a synced ascent" if args.algorithm == "sam_synced" else "the base optimizer alone"
        what += "".join(f", {f[2:]}" for f, on in (("--mixed-precision", args.mixed_precision),
                                                     ("--checkpointing", args.checkpointing),
                                                     ("--return-freed-memory", args.return_freed_memory),
                                                     ("--peer-autocast", args.peer_autocast),
                                                     ("--peer-meta-init", args.peer_meta_init),
                                                     ("--peer-default-malloc", args.peer_default_malloc)) if on)
        print(f"\n{ranks} ranks, {args.model}, basin {args.optimizer}, Python {args.python_optimizer or args.optimizer}, "
              f"{what}, batch {args.batch} per rank, 1 thread per rank; median over {args.rounds} rounds")
        # The llama's window is the gpt's.
        tokens = args.batch * ranks * BLOCK if args.model in (*SHAPES, "llama") else 0
        print(f"  {'contender':<12} {'step ms':>9} {'tokens/s' if tokens else '':>9}   peak RSS per rank (MiB)")
        for name, _ in entries:
            ms = statistics.median(t[name] for t in rounds)
            print(f"  {name:<12} {ms:9.1f} {f'{tokens / ms * 1e3:9.0f}' if tokens else '':>9}   "
                  + " / ".join(f"{m:.0f}" for m in peak[name]))
        for num, den in (p for p in PAIRS if any(name == p[0] for name, _ in entries)):
            ratios = [t[num] / t[den] for t in rounds]
            memory = max(peak[num]) / max(peak[den])
            print(f"  {num} / {den}: time {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
                  f"largest peak RSS {memory:.3f}")
    malloc = "basin with" if args.peer_default_malloc else "every contender with"
    print(f"\nLibTorch: {', '.join(sorted(versions))}; {malloc} {PEER_ENV['GLIBC_TUNABLES']}")


if __name__ == "__main__":
    main()
