#!/usr/bin/env python3
"""PyTorch DDP's training step, the peer of basin's data-parallel step
(bench/ddp_peers.py runs both side by side). One rank of a job started by
basin-run or torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), over
Gloo, on Debian's python3-torch: the LibTorch basin builds against.

  basin-run --nproc 2 -- python3 bench/ddp_peer.py --model mlp1024 --algorithm sam_local --batch 128

algorithm: sgd; sam_local (the ascent's backward under no_sync(): the
           paper's m-sharpness, no communication); sam_synced (both passes
           synced). SAM as most PyTorch users run it: e = rho g / ||g||,
           w + e, descent, w - e, base step.
model:     layer-for-layer copies of basin's registered models (mlp1024,
           mlp2048, mlp4096x3, resnet, gpt: bench/gpt_peer_model.py, on
           random token windows), and for the llama Hugging Face's
           LlamaForCausalLM in its shape (bench/llama_peer_model.py);
           --optimizer sgd (lr 0.01, momentum 0.9), adam or adamw (lr
           1e-3, PyTorch's default implementation:
           one tensor at a time on the CPU) or adam_fused, adamw_fused
           (fused=True, the CPU kernel of torch >= 2.4); rho 0.05.
DDP runs with its defaults (25 MiB buckets, a 1 MiB first one, buckets
rebuilt after the first step) except broadcast_buffers=False: basin syncs
BatchNorm's buffers before evaluation, not at every forward.

Every rank prints one line, timed as basin's step timer times its steps:
  peer impl=pytorch_ddp_<algorithm> model=... batch=... threads=... median_ms=... min_ms=... steps=... torch=... peak_rss_mib=...
"""

import argparse
import contextlib
import resource
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from gpt_peer_model import SHAPES, Gpt, token_batches  # noqa: E402

LR, MOMENTUM, RHO = 0.01, 0.9, 0.05


class BasicBlock(nn.Module):
    """basin's resnet block: conv-BN-ReLU-conv-BN plus the shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class SmallResNet(nn.Module):
    """basin's resnet: width 16, blocks [1, 1, 1], on 1x28x28 inputs."""

    def __init__(self, width=16, blocks=(1, 1, 1), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(width)
        layers, cin = [], width
        for stage, count in enumerate(blocks):
            cout = width << stage
            for b in range(count):
                layers.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_model(name):
    if name == "mlp4096x3":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    if name in ("mlp1024", "mlp2048"):
        width = int(name[3:])
        return nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                             nn.Linear(width, 10))
    if name == "resnet":
        return SmallResNet()
    if name in SHAPES:
        layers, heads, width = SHAPES[name]
        return Gpt(layers=layers, heads=heads, width=width)
    if name == "llama":
        from llama_peer_model import Llama  # transformers, only where the llama runs
        return Llama()
    raise ValueError(f"unknown model {name!r}")


def make_optimizer(params, name):
    """adam, adamw (PyTorch's default implementation), adam_fused, adamw_fused (fused=True) or sgd (momentum)."""
    if name.startswith("adamw"):
        return torch.optim.AdamW(params, lr=1e-3, fused=name == "adamw_fused")  # weight decay 0.01, as basin's
    if name.startswith("adam"):
        return torch.optim.Adam(params, lr=1e-3, fused=name == "adam_fused")
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def make_batches(rank, batch, model="mlp"):
    """Four batches of this rank's own, drawn from its seed (token windows for the gpt and the llama)."""
    if model in SHAPES:
        return token_batches(rank, batch)
    if model == "llama":
        from llama_peer_model import VOCAB
        return token_batches(rank, batch, vocab=VOCAB)
    generator = torch.Generator().manual_seed(rank)
    return [(torch.randn(batch, 1, 28, 28, generator=generator),
             torch.randint(0, 10, (batch,), generator=generator)) for _ in range(4)]


def loss_of(logits, y):
    """Cross-entropy over classes, or over every token of [n, T, V] logits."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten()) if logits.dim() == 3 else F.cross_entropy(logits, y)


def time_and_report(step, batches, impl, args):
    """Times `step` over the batches in turn, warm-up steps left out; prints the peer line with the peak RSS."""
    times = []
    for i in range(args.warmup + args.steps):
        x, y = batches[i % len(batches)]
        start = time.perf_counter()
        step(x, y)
        times.append((time.perf_counter() - start) * 1e3)
    times = times[args.warmup:]
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peer impl={impl} model={args.model} batch={args.batch} threads={args.threads} "
          f"median_ms={statistics.median(times):.4f} min_ms={min(times):.4f} steps={len(times)} "
          f"torch={torch.__version__} peak_rss_mib={peak_rss_mib:.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp1024")
    parser.add_argument("--algorithm", choices=("sgd", "sam_local", "sam_synced"), default="sgd")
    parser.add_argument("--optimizer", choices=("sgd", "adam", "adam_fused", "adamw", "adamw_fused"), default="sgd")
    parser.add_argument("--batch", type=int, default=128, help="per rank")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(make_model(args.model), broadcast_buffers=False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, args.optimizer)
    batches = make_batches(rank, args.batch, args.model)

    def sgd_step(x, y):
        optimizer.zero_grad()
        loss_of(model(x), y).backward()
        optimizer.step()

    def sam_step(x, y, synced):
        optimizer.zero_grad()
        with contextlib.nullcontext() if synced else model.no_sync():
            loss_of(model(x), y).backward()
        with torch.no_grad():
            norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
            scale = RHO / (norm + 1e-12)
            perturbation = [p.grad * scale for p in params]
            for p, e in zip(params, perturbation):
                p.add_(e)
        optimizer.zero_grad()
        loss_of(model(x), y).backward()
        with torch.no_grad():
            for p, e in zip(params, perturbation):
                p.sub_(e)
        optimizer.step()

    step = {"sgd": sgd_step, "sam_local": lambda x, y: sam_step(x, y, False),
            "sam_synced": lambda x, y: sam_step(x, y, True)}[args.algorithm]
    time_and_report(step, batches, f"pytorch_ddp_{args.algorithm}", args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
