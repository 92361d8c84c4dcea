#!/usr/bin/env python3
"""PyTorch FSDP2's training step with SAM, the peer of basin's zero3 step
(bench/sharded_peers.py runs both side by side). One rank of a job started
by basin-run or torchrun, over Gloo on the CPU; needs torch >= 2.6
(torch.distributed.fsdp.fully_shard), PyPI's 2.11 in bench/sharded_peers.sh.

  basin-run --nproc 2 -- python bench/fsdp_peer.py --model mlp4096x3 --optimizer adam --batch 32

FSDP2 as its documentation sets it up: fully_shard on each Linear (a unit,
as basin's mlp declares each layer one), or on each block of the gpt or
decoder layer of the llama (as basin's declare them), then on the root (the
embeddings, final norm and the llama's head: FSDP2's usual wrapping, where
basin shards the tables as units of their own); defaults
otherwise (parameters resharded after forward and gathered again for
backward, fp32). --mixed-precision gives every fully_shard
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32), the loss
taken in fp32; --autocast runs the forward under CPU autocast to bf16 as
nanoGPT's training loop does (LayerNorm, softmax and the loss in fp32, as
basin's amp_bf16; without it FSDP2's policy runs every op in bf16); --checkpointing wraps every unit in checkpoint_wrapper first
(apply_activation_checkpointing's way, as torchtitan does for each block). SAM as a user writes it over sharded parameters, its ascent
synced (the reduce-scatter of FSDP's backward; a rank-local ascent would
need whole gradients): the squared norm of each rank's gradient shards
all-reduced into the global one, e = rho g / ||g|| on the shards, w + e,
descent, w - e, base step. Same models, optimizers and rho as
bench/ddp_peer.py.

Every rank prints one line, timed as basin's step timer times its steps:
  peer impl=fsdp2_<algorithm> model=... batch=... threads=... median_ms=... min_ms=... steps=... torch=... peak_rss_mib=...
"""

import argparse
import warnings

warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402

from ddp_peer import RHO, loss_of, make_batches, make_model, make_optimizer, time_and_report  # noqa: E402
from gpt_peer_model import SHAPES, Block  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp4096x3")
    parser.add_argument("--algorithm", choices=("sgd", "sam_synced"), default="sam_synced")
    parser.add_argument("--optimizer", choices=("sgd", "adam", "adam_fused", "adamw", "adamw_fused"), default="adam")
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mixed-precision", action="store_true", help="bf16 parameters gathered, fp32 reduce")
    parser.add_argument("--checkpointing", action="store_true", help="every unit's activations recomputed")
    parser.add_argument("--meta-init", action="store_true",
                        help="gpt models: build the model on the meta device, shard it, then allocate and initialise "
                             "the shards alone (FSDP2's deferred init: no rank ever holds the whole model)")
    parser.add_argument("--shard-group-size", type=int, default=0,
                        help="HSDP: shard within groups of this many consecutive ranks, replicate across them "
                             "(fully_shard over a 2-D mesh, replicate x shard)")
    parser.add_argument("--autocast", action="store_true",
                        help="forward and loss under CPU autocast to bf16 (nanoGPT's way; basin's amp_bf16 numerics: "
                             "LayerNorm, softmax and the loss in fp32)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    if args.meta_init:
        if args.model not in SHAPES:
            parser.error("--meta-init is for the gpt models")
        with torch.device("meta"):
            model = make_model(args.model)
    else:
        model = make_model(args.model)
    # A unit per gpt block or llama layer (FSDP2's documented use for transformers), else per Linear, as basin's
    # models declare.
    if args.model == "llama":
        from llama_peer_model import UNIT as unit  # transformers, only where the llama runs
    else:
        unit = Block if args.model in SHAPES else nn.Linear
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.mixed_precision \
        else MixedPrecisionPolicy()
    units = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, unit)]
    mesh, norm_group = None, None  # the default: every rank one shard group
    if args.shard_group_size:
        from torch.distributed.device_mesh import init_device_mesh
        replicas = dist.get_world_size() // args.shard_group_size
        mesh = init_device_mesh("cpu", (replicas, args.shard_group_size), mesh_dim_names=("replicate", "shard"))
        norm_group = mesh["shard"].get_group()  # the replicas' shards are alike: a row counted once
    for parent, name, child in units:
        if args.checkpointing:
            child = checkpoint_wrapper(child)
            setattr(parent, name, child)
        fully_shard(child, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if args.meta_init:
        model.to_empty(device="cpu")
        model.init_weights()
    # The loss in fp32 whenever the logits may be bf16 (autocast takes cross-entropy in fp32 too).
    low = args.mixed_precision or args.autocast
    loss_of_logits = loss_of if not low else (lambda logits, y: loss_of(logits.float(), y))

    def forward(x):
        if not args.autocast:
            return model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, args.optimizer)
    batches = make_batches(rank, args.batch, args.model)

    def sgd_step(x, y):
        optimizer.zero_grad()
        loss_of_logits(forward(x), y).backward()
        optimizer.step()

    def sam_step(x, y):
        optimizer.zero_grad()
        loss_of_logits(forward(x), y).backward()
        with torch.no_grad():
            shards = [p.grad.to_local() for p in params]
            squared = torch.stack([g.pow(2).sum() for g in shards]).sum()
            dist.all_reduce(squared, group=norm_group)  # the norm of the whole gradient, not of this rank's shards
            scale = RHO / (squared.sqrt() + 1e-12)
            perturbation = [g * scale for g in shards]
            del shards  # only e is kept: zero_grad below frees the ascent's gradients, as basin's step does
            for p, e in zip(params, perturbation):
                p.to_local().add_(e)
        optimizer.zero_grad()
        loss_of_logits(forward(x), y).backward()
        with torch.no_grad():
            for p, e in zip(params, perturbation):
                p.to_local().sub_(e)
        optimizer.step()

    step = sam_step if args.algorithm == "sam_synced" else sgd_step
    time_and_report(step, batches, f"fsdp2{'_hsdp' if mesh is not None else ''}_{args.algorithm}", args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
