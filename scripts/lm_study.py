#!/usr/bin/env python3
"""The language-model study: does SAM help a small GPT, and does it cut
forgetting?

1. Pretraining: the fortunes GPT of examples/configs/fortunes_gpt_sam.json
   (byte-level, 0.8M parameters), the same steps and tokens for every
   method: AdamW alone, SAM, and the two best variants of the label-noise
   study (GSAM, mSAM), 3 seeds each.
2. Forgetting: each pretrained model fine-tuned on a second corpus (the
   licence texts of /usr/share/common-licenses) with plain AdamW, the same
   for all; then its validation loss on the fortunes again.

Runs basin-train two at a time with one thread each; a finished run is
skipped when the study is started again. Writes its section of
docs/results.md (between the markers below, the rest of the file left as
it is) and two PNG plots with gnuplot.

  python3 scripts/lm_study.py --basin-train build/programs/basin-train [--smoke] [--out docs]

--smoke runs a tiny version in seconds. Only the standard library is used.
"""

import concurrent.futures
import glob
import json
import os
import statistics
import subprocess
import sys

from study import gnuplot, merged, notes_section, study_arguments

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "configs",
                       "fortunes_gpt_sam.json")
LICENCES = "/usr/share/common-licenses"
LICENCE_TEST = "MPL-2.0"  # held out: the fine-tuning corpus's validation text

# name, label, "algorithms" object (rho 0.05: the example's; alpha the label-noise study's), other keys.
# At the example's lr 0.01 some seeds stall near 2.2-2.5 nats (AdamW's and SAM's alike), so both also run lower.
METHODS = [
    ("adamw", "AdamW, lr 0.01", {}, {}),
    ("adamw_lr3e-3", "AdamW, lr 0.003", {}, {"optimizer": {"lr": 0.003}}),
    ("adamw_lr1e-3", "AdamW, lr 0.001", {}, {"optimizer": {"lr": 0.001}}),
    ("sam", "SAM, lr 0.01", {"sam": {"rho": 0.05}}, {}),
    ("sam_lr3e-3", "SAM, lr 0.003", {"sam": {"rho": 0.05}}, {"optimizer": {"lr": 0.003}}),
    ("gsam", "GSAM, lr 0.01", {"gsam": {"rho": 0.05, "alpha": 0.4}}, {}),
    ("msam", "mSAM (m 4), lr 0.01", {"msam": {"rho": 0.05}}, {}),
]
SEEDS = [0, 1, 2]
FINE_TUNE = {
    "max_steps": 300,
    "optimizer": {"name": "adamw", "lr": 0.001, "betas": [0.9, 0.99], "weight_decay": 0.1,
                  "param_groups": [{"params": "bias|ln_", "weight_decay": 0}]},
    "schedulers": [{"name": "cosine_warmup", "warmup": 20}],
}
SMOKE = {"pretrain_steps": 12, "fine_tune_steps": 6, "seeds": [0], "methods": ["adamw", "sam"]}

BEGIN = "<!-- language-model study: written by scripts/lm_study.py from its runs -->"
END = "<!-- end of the language-model study -->"


def licence_files():
    """The licence texts, each once (GPL, LGPL and GFDL are links to a version)."""
    files = sorted(p for p in glob.glob(os.path.join(LICENCES, "*")) if os.path.isfile(p) and not os.path.islink(p))
    return [p for p in files if os.path.basename(p) != LICENCE_TEST], os.path.join(LICENCES, LICENCE_TEST)


def example():
    """The example's config, a fresh copy each time (the configs below change it)."""
    with open(EXAMPLE) as f:
        return json.load(f)


def example_steps():
    return example()["max_steps"]


def pretrain_config(method, seed, steps):
    config = example()
    _, _, algorithms, overrides = next(m for m in METHODS if m[0] == method)
    config = merged(merged(config, overrides), {"seed": seed, "threads": 1, "max_steps": steps})
    if steps < config["log_every"] * 5:
        config["log_every"] = max(1, steps // 6)  # a smoke run's curve has points too
    config["algorithms"] = algorithms  # replaced, not merged into the example's
    return config


def fine_tune_config(pretrained, seed, steps):
    """Plain AdamW on the licences, from the pretrained weights; tested on the held-out licence."""
    base = example()
    train, test = licence_files()
    config = merged(base, FINE_TUNE)
    config.update({"seed": seed, "threads": 1, "max_steps": steps, "init_from": pretrained, "algorithms": {},
                   "log_every": 10})  # update: the example's SAM replaced, not merged
    config["data"] = merged(base["data"], {"train": train, "test": test})
    return config


def evaluation_config(weights, test_files):
    """One SGD step at lr 0 (the weights unchanged) from `weights`: basin-train's
    evaluation of them on `test_files`, which the summary then holds."""
    base = example()
    config = merged(base, {"threads": 1, "max_steps": 1, "init_from": weights, "schedulers": []})
    config["optimizer"], config["algorithms"] = {"name": "sgd", "lr": 0.0}, {}
    config["data"] = merged(base["data"], {"train": test_files, "test": test_files})
    return config


def execute(run_dir, config, basin_train):
    """Runs basin-train once in run_dir unless a finished summary is there; returns the summary."""
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
        if not summary.get("interrupted", False):
            return summary
    os.makedirs(run_dir, exist_ok=True)
    config_path = os.path.join(run_dir, "study-config.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(run_dir, "log.txt"), "w") as log:
        result = subprocess.run([basin_train, "--config", config_path, "--run-dir", run_dir, "--overwrite",
                                 "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise RuntimeError(f"{run_dir}: basin-train exited with {result.returncode}; see {run_dir}/log.txt")
    with open(summary_path) as f:
        return json.load(f)


def one_seed(method, seed, root, basin_train, smoke):
    """Pretrain, fine-tune, and the evaluations around them, for one method and seed."""
    base = os.path.join(root, method, f"seed-{seed}")
    licence_test = licence_files()[1]
    fortunes_test = example()["data"]["test"]
    steps = SMOKE["pretrain_steps"] if smoke else example_steps()
    pre = execute(os.path.join(base, "pretrain"), pretrain_config(method, seed, steps), basin_train)
    pretrained = os.path.join(base, "pretrain", "state_dict.pt")
    licence_before = execute(os.path.join(base, "licences-before"), evaluation_config(pretrained, licence_test),
                             basin_train)
    fine_steps = SMOKE["fine_tune_steps"] if smoke else FINE_TUNE["max_steps"]
    fine = execute(os.path.join(base, "fine-tune"), fine_tune_config(pretrained, seed, fine_steps), basin_train)
    fine_tuned = os.path.join(base, "fine-tune", "state_dict.pt")
    after = execute(os.path.join(base, "fortunes-after"), evaluation_config(fine_tuned, fortunes_test), basin_train)
    print(f"lm study: {method} seed {seed}: fortunes {pre['test_loss']:.4f} -> {after['test_loss']:.4f} after "
          f"fine-tuning (licences {licence_before['test_loss']:.4f} -> {fine['test_loss']:.4f})", flush=True)
    return {"method": method, "seed": seed, "fortunes": pre["test_loss"], "fortunes_after": after["test_loss"],
            "licences_before": licence_before["test_loss"], "licences": fine["test_loss"],
            "seconds": training_seconds(os.path.join(base, "pretrain", "metrics.jsonl")), "accuracy": pre["test_accuracy"],
            "curve": step_losses(os.path.join(base, "pretrain", "metrics.jsonl"))}


def training_seconds(path):
    """The run's training time, evaluation aside (its last epoch record's; the runs are under one epoch)."""
    seconds = float("nan")
    with open(path) as f:
        for line in f:
            seconds = json.loads(line).get("train_seconds", seconds)
    return seconds


def step_losses(path):
    out = []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record and "step" in record and "test_loss" not in record:
                out.append((record["step"], record["loss"]))
    return out


def mean_sd(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt(values, digits=3):
    mean, sd = mean_sd(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def write_report(results, out_dir, smoke, notes_path):
    methods = [m for m in METHODS if any(r["method"] == m[0] for r in results)]
    by = {m[0]: [r for r in results if r["method"] == m[0]] for m in methods}
    seeds = sorted({r["seed"] for r in results})
    lines = [BEGIN, "", "# Results: SAM on a small language model, and forgetting" + (" (smoke run)" if smoke else ""),
             "", "Written by `python3 scripts/lm_study.py`" + (" --smoke" if smoke else "") +
             "; every number below comes from its runs.", ""]
    add = lines.append
    config = pretrain_config("adamw", 0, 0)
    add(f"**Setup.** The fortunes GPT of `examples/configs/fortunes_gpt_sam.json`: bytes of Debian's fortunes "
        f"(`wisdom` held out for validation), a GPT of {config['model']['n_layer']} layers, {config['model']['n_embd']} "
        f"wide, block {config['data']['block_size']}, batch {config['data']['batch_size']}, AdamW (lr "
        f"{config['optimizer']['lr']}, the example's, under every method; AdamW and SAM also at lower ones) with warmup "
        f"and a cosine, clipping at {config['grad_clip_norm']}, "
        f"{SMOKE['pretrain_steps'] if smoke else example_steps()} steps for every method: the same tokens, "
        f"so SAM and its variants spend twice AdamW's compute. Then each pretrained model is fine-tuned with plain "
        f"AdamW (lr {FINE_TUNE['optimizer']['lr']}, {FINE_TUNE['max_steps'] if not smoke else SMOKE['fine_tune_steps']}"
        f" steps, the same for all) on the licence texts of {LICENCES} ({LICENCE_TEST} held out), and its "
        f"validation loss on `wisdom` measured again. Losses are nats per byte on the validation text; "
        f"mean ± sd over seeds {', '.join(map(str, seeds))} (the seed draws the weights and the batch order). "
        f"One thread per run, two runs at a time on 2 cores.")
    add("")
    add("| method | keys | fortunes loss | next-byte accuracy | licences loss, before → after fine-tuning "
        "| fortunes loss after fine-tuning | rise (forgetting) | training s |")
    add("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, label, algorithms, overrides in methods:
        runs = by[name]
        rise = [r["fortunes_after"] - r["fortunes"] for r in runs]
        keys = f"`{json.dumps(algorithms)}`" if algorithms else "none"
        if overrides:
            keys += f", `{json.dumps(overrides)}`"
        add(f"| {label} | {keys} | {fmt([r['fortunes'] for r in runs])} | {fmt([r['accuracy'] for r in runs])} | "
            f"{fmt([r['licences_before'] for r in runs])} → {fmt([r['licences'] for r in runs])} | "
            f"{fmt([r['fortunes_after'] for r in runs])} | {fmt(rise)} | {statistics.mean(r['seconds'] for r in runs):.0f} |")
    add("")
    plots(by, methods, out_dir)
    add("![training loss per step](lm_loss.png)")
    add("")
    add("![fortunes validation loss before and after fine-tuning](lm_forgetting.png)")
    add("")
    lines += notes_section(notes_path, smoke)
    add(END)
    path = os.path.join(out_dir, "results.md")
    text = open(path).read() if os.path.exists(path) else ""
    begin, end = text.find(BEGIN), text.find(END)
    section = "\n".join(lines)
    text = text[:begin] + section + text[end + len(END):] if 0 <= begin < end else text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(f"lm study: wrote its section of {path} and its plots", flush=True)


def plots(by, methods, out_dir):
    data = os.path.join(out_dir, "lm.dat")
    with open(data, "w") as f:
        for name, label, *_ in methods:
            curves = [dict(r["curve"]) for r in by[name]]
            for step in sorted(set.intersection(*(set(c) for c in curves))):
                f.write(f"{step} {statistics.mean(c[step] for c in curves)}\n")
            f.write("\n\n")
    plot = ", ".join(f"'lm.dat' index {i} with lines lw 2 title '{m[1]}'" for i, m in enumerate(methods))
    gnuplot(out_dir, "lm_loss.png", "fortunes GPT: training loss (mean over seeds)", "step", "loss (nats per byte)",
            f"set key top right\nset yrange [*:*]\nplot {plot}")
    with open(data, "w") as f:
        lows, rises = [], [0.0]
        for name, label, *_ in methods:
            before, sd_before = mean_sd([r["fortunes"] for r in by[name]])
            rise, sd_rise = mean_sd([r["fortunes_after"] - r["fortunes"] for r in by[name]])
            lows.append(before - sd_before)
            rises += [rise - sd_rise, rise + sd_rise]
            f.write(f"\"{label}\" {before} {sd_before} {rise} {sd_rise}\n")
    floor = min(lows) - 0.05  # the differences are hundredths of a nat: the first panel starts near them
    gnuplot(out_dir, "lm_forgetting.png", "", "", "",
            "set style data histogram\nset style histogram errorbars gap 1 lw 1\nset style fill solid 0.6 border -1\n"
            "unset key\nset xtics rotate by -30 scale 0\nset bmargin 7\nset multiplot layout 1,2 title 'fortunes validation loss, nats per byte (mean ± sd over seeds)'\n"
            f"set title 'after pretraining'\nset yrange [{floor}:*]\nplot 'lm.dat' using 2:3:xtic(1) lc rgb '#4060c0'\n"
            "set title 'rise after fine-tuning on the licences'\n"
            f"set yrange [{1.1 * min(rises)}:{1.1 * max(rises)}]\nset xzeroaxis lw 1\n"
            "plot 'lm.dat' using 4:5:xtic(1) lc rgb '#c04040'\nunset multiplot", size="1000,520")
    os.remove(data)


def main():
    args = study_arguments(__doc__.split("\n\n")[0], ("runs/lm-study", "lm-runs")).parse_args()
    root = args.runs or (os.path.join(args.out, "lm-runs") if args.smoke else os.path.join("runs", "lm-study"))
    methods = SMOKE["methods"] if args.smoke else [m[0] for m in METHODS]
    seeds = SMOKE["seeds"] if args.smoke else SEEDS
    basin_train = os.path.abspath(args.basin_train)
    work = [(m, s) for s in seeds for m in methods]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda w: one_seed(*w, root, basin_train, args.smoke), work))
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm_study_notes.md")
    os.makedirs(args.out, exist_ok=True)
    write_report(results, args.out, args.smoke, notes)


if __name__ == "__main__":
    sys.exit(main())
