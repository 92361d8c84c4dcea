"""The costs of the rules made for adapters and of random weight
perturbation, side by side in one run (issue 51's goals), on the fortunes
examples' models and batch (32 windows of 64 tokens), one thread:

  flat_lora / LoRA, bi_lora / LoRA, sam on LoRA / LoRA   (step time, peak RSS)
  rwp / SGD, arwp / SGD                                (full training, one process)
  rwp "mix" on 2 ranks / ddp SGD on 2 ranks            (16 windows per rank: the same global batch)

Every configuration runs in turn, round after round, each a fresh process
(basin-bench-step, basin-run for the two ranks). A ratio is taken within each
round, against its baseline of the same model run in that round (this
machine's speed drifts by several percent between runs); the tables give the
median of the rounds' ratios and their range, and the median step times.

  python3 bench/adapter_costs.py --build build [--rounds 3] [--steps 20] [--models fortunes_gpt fortunes_llama]
"""
import argparse
import re
import statistics
import subprocess
import sys

LORA = {
    "fortunes_gpt": r"h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)",
    "fortunes_llama": r"layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)",
}

# (name, baseline name or None, arguments of basin-bench-step, ranks)
def configurations(model):
    lora = ["--optimizer", "adamw", "--lora", LORA[model]]
    return [
        ("LoRA", None, ["--impl", "trainer_sgd", *lora], 1),
        ("flat_lora", "LoRA", ["--impl", "trainer_sam", "--algorithm", "flat_lora", *lora], 1),
        ("bi_lora", "LoRA", ["--impl", "trainer_sam", "--algorithm", "bi_lora", *lora], 1),
        ("sam on LoRA", "LoRA", ["--impl", "trainer_sam", "--algorithm", "sam", *lora], 1),
        ("SGD", None, ["--impl", "trainer_sgd", "--optimizer", "sgd"], 1),
        ("rwp", "SGD", ["--impl", "trainer_sam", "--algorithm", "rwp", "--optimizer", "sgd"], 1),
        ("arwp", "SGD", ["--impl", "trainer_sam", "--algorithm", "arwp", "--optimizer", "sgd"], 1),
        ("ddp SGD, 2 ranks", None, ["--impl", "trainer_sgd", "--optimizer", "sgd", "--parallel", "ddp"], 2),
        ("rwp mix, 2 ranks", "ddp SGD, 2 ranks",
         ["--impl", "trainer_sam", "--algorithm", "rwp", "--keys", '{"mix": 0.5}', "--optimizer", "sgd",
          "--parallel", "ddp"], 2),
    ]


def run(build, model, arguments, ranks, steps):
    timer = f"{build}/bench/basin-bench-step"
    common = ["--model", model, "--batch", str(32 // ranks), "--steps", str(steps), "--threads", "1"]
    command = [timer, *arguments, *common]
    if ranks > 1:
        command = [f"{build}/programs/basin-run", "--nproc", str(ranks), "--", *command]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    line = next(l for l in out.splitlines() if "median_ms=" in l and (ranks == 1 or l.startswith("[rank 0]")))
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    return float(fields["median_ms"]), float(fields["peak_rss_mib"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", nargs="+", default=["fortunes_gpt", "fortunes_llama"])
    args = parser.parse_args()
    for model in args.models:
        configs = configurations(model)
        times = {name: [] for name, *_ in configs}
        memory = {name: [] for name, *_ in configs}
        for round_index in range(args.rounds):
            for name, _, arguments, ranks in configs:
                ms, rss = run(args.build, model, arguments, ranks, args.steps)
                times[name].append(ms)
                memory[name].append(rss)
                print(f"# {model} round {round_index + 1}: {name}: {ms:.1f} ms, {rss:.0f} MiB", file=sys.stderr)
        print(f"\n{model}, 32 windows of 64 tokens a step, 1 thread, {args.rounds} rounds of {args.steps} steps")
        print("| configuration | step (ms, median) | / baseline (median of rounds; range) | peak RSS (MiB) | / baseline |")
        print("| --- | --- | --- | --- | --- |")
        for name, baseline, *_ in configs:
            ms, rss = statistics.median(times[name]), statistics.median(memory[name])
            if baseline is None:
                print(f"| {name} | {ms:.1f} | 1 | {rss:.0f} | 1 |")
                continue
            ratios = [a / b for a, b in zip(times[name], times[baseline])]
            rss_ratios = [a / b for a, b in zip(memory[name], memory[baseline])]
            print(f"| {name} | {ms:.1f} | {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
                  f"{rss:.0f} | {statistics.median(rss_ratios):.3f} |")


if __name__ == "__main__":
    main()
