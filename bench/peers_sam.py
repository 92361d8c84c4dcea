#!/usr/bin/env python3
"""Python peers for basin's SAM step benchmark (bench/sam_step_bench.cpp).

Times one training step of plain SGD-momentum and of two Python SAM
implementations on the same models, shapes and LibTorch version as basin, so
the C++ numbers have an apples-to-apples reference. Prints one parseable line:

  peer impl=<impl> model=<model> batch=<b> threads=<t> median_ms=<f> min_ms=<f> steps=<n> torch=<ver>

--check instead verifies that both SAM peers compute the same update as a
hand-written SAM formula, so that a timing gap cannot come from doing
different work.

Requires pytorch-optimizer==4.1.0 (the version this script was written
against; its SAM API is read from that release's source) for
--impl pytorch_optimizer_sam and --check.
"""

import argparse
import copy
import statistics
import sys
import time
import warnings

# torch warns at import when NumPy is absent; stdout/stderr must stay clean
# for the driver. (NumPy is in the venv anyway as a pytorch-optimizer
# dependency, so this only matters in a torch-only environment.)
warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PYTORCH_OPTIMIZER_VERSION = "4.1.0"
LR, MOMENTUM, RHO = 0.01, 0.9, 0.05
IMPLS = ("sgd", "eager_sam", "pytorch_optimizer_sam")


# --------------------------------------------------------------------------
# Models: layer-for-layer copies of basin's registered "mlp" and "cnn", so the
# forward/backward cost being compared is identical on both sides.
# --------------------------------------------------------------------------
def make_model(name):
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256),
            nn.ReLU(),
            nn.Linear(256, 10),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
            nn.Linear(128, 10),
        )
    if name == "cnn_channels_last":  # what a user who knows oneDNN's faster kernels writes
        return make_model("cnn").to(memory_format=torch.channels_last)
    raise ValueError(f"unknown model {name!r}")


# --------------------------------------------------------------------------
# Eager SAM in the style of the widely used davda54/sam reference: the
# two-call first_step/second_step protocol, a per-parameter weight backup,
# and the global norm taken as the norm of the stacked per-parameter norms.
# Mirroring that style (rather than optimising it) is the point: it is what
# most PyTorch users actually run.
# --------------------------------------------------------------------------
class EagerSAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer_cls, rho=RHO, **base_kwargs):
        if rho < 0.0:
            raise ValueError(f"rho must be non-negative, got {rho}")
        super().__init__(params, dict(rho=rho, **base_kwargs))
        # Sharing param_groups means the base optimizer sees the very same
        # tensors and hyper-parameters (e.g. an LR scheduler acting on SAM).
        self.base_optimizer = base_optimizer_cls(self.param_groups, **base_kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def _grad_norm(self):
        # Two-level norm (per tensor, then over the stack) equals the global
        # L2 norm, without concatenating every gradient into one buffer.
        return torch.norm(
            torch.stack([
                p.grad.norm(p=2)
                for group in self.param_groups
                for p in group["params"]
                if p.grad is not None
            ]),
            p=2,
        )

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            # eps keeps a zero gradient from producing NaN weights.
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                p.add_(p.grad * scale.to(p))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                # The base optimizer must step from w, not from w + e.
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    def step(self, closure=None):
        raise RuntimeError("EagerSAM is driven via first_step()/second_step()")


def make_pytorch_optimizer_sam(params):
    try:
        from pytorch_optimizer import SAM
    except ImportError as exc:
        raise SystemExit(
            "pytorch_optimizer_sam needs pytorch-optimizer "
            f"(pip install pytorch-optimizer=={PYTORCH_OPTIMIZER_VERSION}): {exc}"
        )
    # 4.1.0 signature: SAM(params, base_optimizer, rho=0.05, adaptive=False,
    # use_gc=False, perturb_eps=1e-12, foreach=None, **base_kwargs).
    # foreach is left at its default (None) because that is what users get;
    # on CPU it means the per-parameter loop, like EagerSAM and basin.
    return SAM(params, torch.optim.SGD, rho=RHO, lr=LR, momentum=MOMENTUM)


def make_optimizer(impl, model):
    if impl == "sgd":
        return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    if impl == "eager_sam":
        return EagerSAM(model.parameters(), torch.optim.SGD, rho=RHO, lr=LR, momentum=MOMENTUM)
    if impl == "pytorch_optimizer_sam":
        return make_pytorch_optimizer_sam(model.parameters())
    raise ValueError(f"unknown impl {impl!r}")


def make_step(impl, model, opt, inputs, targets):
    """Returns a zero-argument callable performing exactly one training step."""

    def forward_backward():
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        return loss

    if impl == "sgd":
        def step():
            opt.zero_grad()
            forward_backward()
            opt.step()
    else:
        # Both SAM peers expose the same two-pass protocol, so one driver
        # keeps the timed work identical between them.
        def step():
            opt.zero_grad()
            forward_backward()
            opt.first_step()
            opt.zero_grad()
            forward_backward()
            opt.second_step()
    return step


def make_data(batch, seed, channels_last=False):
    # Fixed tensors reused every step: the benchmark measures the optimizer
    # step, not data loading or RNG.
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch, 1, 28, 28, generator=gen)
    targets = torch.randint(0, 10, (batch,), generator=gen)
    if channels_last:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets


def bench(args):
    torch.manual_seed(args.seed)
    model = make_model(args.model)
    inputs, targets = make_data(args.batch, args.seed, channels_last=args.model.endswith("channels_last"))
    opt = make_optimizer(args.impl, model)
    step = make_step(args.impl, model, opt, inputs, targets)

    # Warm-up steps allocate the momentum buffers and SAM backups and settle
    # the allocator, none of which is steady-state cost.
    for _ in range(args.warmup):
        step()

    times_ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times_ms.append((time.perf_counter() - t0) * 1e3)

    print(
        f"peer impl={args.impl} model={args.model} batch={args.batch} "
        f"threads={args.threads} median_ms={statistics.median(times_ms):.4f} "
        f"min_ms={min(times_ms):.4f} steps={args.steps} torch={torch.__version__}"
    )


# --------------------------------------------------------------------------
# --check: both peers against SAM written out by hand.
# --------------------------------------------------------------------------
def reference_sam(model, inputs, targets, n_steps):
    """SAM with SGD-momentum, from the formula only (no optimizer classes).

    w_adv = w + rho * g / ||g||   (||g|| over ALL parameters, via one concat)
    buf   = g_adv                 on the first step, then MOMENTUM*buf + g_adv
    w     = w - LR * buf
    The concatenated norm is deliberately computed differently from the
    peers' stacked per-tensor norms, so agreement checks that equivalence.
    """
    params = list(model.parameters())

    def grads_at(ws):
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, w in zip(params, ws):
                p.copy_(w)
        loss = F.cross_entropy(model(inputs), targets)
        gs = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, w in zip(params, saved):
                p.copy_(w)
        return gs

    ws = [p.detach().clone() for p in params]
    bufs = None
    for _ in range(n_steps):
        g = grads_at(ws)
        norm = torch.cat([t.reshape(-1) for t in g]).norm(p=2)
        g_adv = grads_at([w + RHO * gi / (norm + 1e-12) for w, gi in zip(ws, g)])
        if bufs is None:
            bufs = [ga.clone() for ga in g_adv]
        else:
            bufs = [MOMENTUM * b + ga for b, ga in zip(bufs, g_adv)]
        ws = [w - LR * b for w, b in zip(ws, bufs)]
    return ws


def check(args):
    torch.manual_seed(args.seed)
    base = make_model("mlp")
    inputs, targets = make_data(args.batch, args.seed)

    # Two steps, not one: the first SGD-momentum step ignores momentum
    # (buf = grad), so only a second step exercises the momentum buffer
    # surviving SAM's weight swap. Step 1 alone is the brief's formula.
    results = {}
    for n_steps in (1, 2):
        results[("reference", n_steps)] = reference_sam(copy.deepcopy(base), inputs, targets, n_steps)
        for impl in ("eager_sam", "pytorch_optimizer_sam"):
            model = copy.deepcopy(base)
            opt = make_optimizer(impl, model)
            step = make_step(impl, model, opt, inputs, targets)
            for _ in range(n_steps):
                step()
            results[(impl, n_steps)] = [p.detach().clone() for p in model.parameters()]

    pairs = [
        ("eager_sam", "reference"),
        ("pytorch_optimizer_sam", "reference"),
        ("eager_sam", "pytorch_optimizer_sam"),
    ]
    failures = []
    for n_steps in (1, 2):
        for a, b in pairs:
            diff = max(
                (x - y).abs().max().item()
                for x, y in zip(results[(a, n_steps)], results[(b, n_steps)])
            )
            if diff > 1e-6:
                failures.append(f"{a} vs {b} after {n_steps} step(s): max |diff| = {diff:.3e}")
    if failures:
        raise AssertionError("SAM check failed:\n  " + "\n  ".join(failures))
    print("check ok")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"pytorch_optimizer_sam uses pytorch-optimizer=={PYTORCH_OPTIMIZER_VERSION}.",
    )
    parser.add_argument("--impl", choices=IMPLS, default="eager_sam")
    parser.add_argument("--model", choices=("mlp", "cnn", "cnn_channels_last"), default="cnn")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check", action="store_true",
        help="verify eager_sam and pytorch_optimizer_sam against a hand-written "
             "SAM step on the mlp instead of timing",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or args.threads < 1:
        parser.error("--steps, --batch, --threads must be >= 1 and --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.check:
        check(args)
    else:
        bench(args)


if __name__ == "__main__":
    main(sys.argv[1:])
