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
3. Fine-tuning through adapters: AdamW's pretrained models (its best lr)
   fine-tuned on the licences by full fine-tuning, LoRA, SAM on LoRA,
   Flat-LoRA and Bi-LoRA, 3 seeds: the licences' validation loss, the
   forgetting on the fortunes, and the time.

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
    "max_epochs": 1,  # one pass over the licences (107 steps): the run's summary says how many
    "optimizer": {"name": "adamw", "lr": 0.001, "betas": [0.9, 0.99], "weight_decay": 0.1,
                  "param_groups": [{"params": "bias|ln_", "weight_decay": 0}]},
    "schedulers": [{"name": "cosine_warmup", "warmup": 20}],
}
SMOKE = {"pretrain_steps": 12, "fine_tune_steps": 6, "seeds": [0], "methods": ["adamw", "sam"],
         "adapter_base": "adamw", "fine_tunings": ["full", "lora", "bi_lora"]}

# Part 3 fine-tunes AdamW's models at its best pretraining lr (the table of part 1).
ADAPTER_BASE = "adamw_lr3e-3"
# LoRA on every projection of every block (the QLoRA recipe's "all linear layers"), PEFT's usual r and alpha.
LORA = {"r": 8, "alpha": 16, "targets": "h\\.\\d+\\.(attn\\.c_attn|attn\\.c_proj|mlp\\.c_fc|mlp\\.c_proj)"}
# The adapters' AdamW: no weight decay (PEFT's examples), lr ADAPTER_LR (see the notes for how it was picked).
ADAPTER_LR = 0.01
# name, label, "algorithms" object; None: full fine-tuning, part 2's run. rho 0.05: the papers' and the example's.
FINE_TUNINGS = [
    ("full", "full fine-tuning", None),
    ("lora", "LoRA", {}),
    ("sam_lora", "SAM on LoRA", {"sam": {"rho": 0.05}}),
    ("flat_lora", "Flat-LoRA", {"flat_lora": {"rho": 0.05}}),
    ("bi_lora", "Bi-LoRA", {"bi_lora": {"rho": 0.05}}),
]

BEGIN = "<!-- language-model study: written by scripts/lm_study.py from its runs -->"
END = "<!-- end of the language-model study -->"
ADAPTERS_BEGIN = "<!-- fine-tuning study: written by scripts/lm_study.py from its runs -->"
ADAPTERS_END = "<!-- end of the fine-tuning study -->"


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
    config.update({"seed": seed, "threads": 1, "init_from": pretrained, "algorithms": {},
                   "log_every": 10})  # update: the example's SAM replaced, not merged
    config.pop("max_steps", None)  # the example's pretraining length: the epoch decides
    if steps is not None:
        config["max_steps"] = steps
    config["data"] = merged(base["data"], {"train": train, "test": test})
    return config


def adapter_config(pretrained, seed, steps, algorithms):
    """Part 2's fine-tuning with the base frozen and LoRA adapters trained (AdamW at ADAPTER_LR, no decay)."""
    config = fine_tune_config(pretrained, seed, steps)
    config["optimizer"] = merged({k: v for k, v in config["optimizer"].items() if k != "param_groups"},
                                 {"lr": ADAPTER_LR, "weight_decay": 0.0})
    config["adapters"] = {"lora": dict(LORA)}
    config["algorithms"] = algorithms
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
    fine_steps = SMOKE["fine_tune_steps"] if smoke else None
    fine = execute(os.path.join(base, "fine-tune"), fine_tune_config(pretrained, seed, fine_steps), basin_train)
    fine_tuned = os.path.join(base, "fine-tune", "state_dict.pt")
    after = execute(os.path.join(base, "fortunes-after"), evaluation_config(fine_tuned, fortunes_test), basin_train)
    print(f"lm study: {method} seed {seed}: fortunes {pre['test_loss']:.4f} -> {after['test_loss']:.4f} after "
          f"fine-tuning (licences {licence_before['test_loss']:.4f} -> {fine['test_loss']:.4f})", flush=True)
    return {"method": method, "seed": seed, "fortunes": pre["test_loss"], "fortunes_after": after["test_loss"],
            "licences_before": licence_before["test_loss"], "licences": fine["test_loss"], "fine_steps": fine["steps"],
            "seconds": training_seconds(os.path.join(base, "pretrain", "metrics.jsonl")), "accuracy": pre["test_accuracy"],
            "curve": step_losses(os.path.join(base, "pretrain", "metrics.jsonl"))}


def fine_tune_one(name, seed, root, basin_train, smoke):
    """One fine-tuning of part 3 from the adapter base's pretrained model of this seed, and the fortunes after it."""
    base_method = SMOKE["adapter_base"] if smoke else ADAPTER_BASE
    start = one_seed(base_method, seed, root, basin_train, smoke)  # finds its runs done after the first time
    algorithms = next(f[2] for f in FINE_TUNINGS if f[0] == name)
    base = os.path.join(root, base_method, f"seed-{seed}")
    if algorithms is None:
        run = os.path.join(base, "fine-tune")
        fine, after, fine_steps = start["licences"], start["fortunes_after"], start["fine_steps"]
    else:
        run = os.path.join(root, "adapters", name, f"seed-{seed}")
        steps = SMOKE["fine_tune_steps"] if smoke else None
        config = adapter_config(os.path.join(base, "pretrain", "state_dict.pt"), seed, steps, algorithms)
        summary = execute(os.path.join(run, "fine-tune"), config, basin_train)
        fine, fine_steps = summary["test_loss"], summary["steps"]
        fortunes_test = example()["data"]["test"]
        after = execute(os.path.join(run, "fortunes-after"),
                        evaluation_config(os.path.join(run, "fine-tune", "state_dict.pt"), fortunes_test),
                        basin_train)["test_loss"]
        run = os.path.join(run, "fine-tune")
    print(f"lm study: {name} seed {seed}: licences {start['licences_before']:.4f} -> {fine:.4f}, fortunes "
          f"{start['fortunes']:.4f} -> {after:.4f}", flush=True)
    return {"method": name, "seed": seed, "licences_before": start["licences_before"], "licences": fine,
            "fortunes": start["fortunes"], "fortunes_after": after, "fine_steps": fine_steps,
            "seconds": training_seconds(os.path.join(run, "metrics.jsonl")),
            "curve": step_losses(os.path.join(run, "metrics.jsonl"))}


def steps_run(results):
    """The fine-tuning's steps (one epoch of the licences), as the runs' summaries say."""
    steps = sorted({r["fine_steps"] for r in results})
    return " or ".join(map(str, steps))


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
        f"AdamW (lr {FINE_TUNE['optimizer']['lr']}, {steps_run(results)} steps{'' if smoke else ', one epoch'}, "
        f"the same for all) on the licence texts of {LICENCES} ({LICENCE_TEST} held out), and its "
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
    series = [(m[1], by[m[0]]) for m in methods]
    curves_plot(out_dir, "lm_loss.png", "fortunes GPT: training loss (mean over seeds)", series)
    bar_panels(out_dir, "lm_forgetting.png", "fortunes validation loss, nats per byte (mean ± sd over seeds)", series,
               ("after pretraining", lambda r: r["fortunes"], "#4060c0"),
               ("rise after fine-tuning on the licences", lambda r: r["fortunes_after"] - r["fortunes"]))
    close_section(lines, [("lm_loss.png", "training loss per step"),
                          ("lm_forgetting.png", "fortunes validation loss before and after fine-tuning")],
                  notes_path, smoke, out_dir, (BEGIN, END))


def write_section(path, begin_marker, end_marker, lines):
    """Puts lines (from begin_marker to end_marker) in place of that section of path, or at its end."""
    text = open(path).read() if os.path.exists(path) else ""
    begin, end = text.find(begin_marker), text.find(end_marker)
    section = "\n".join(lines)
    if 0 <= begin < end:
        text = text[:begin] + section + text[end + len(end_marker):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)
    print(f"lm study: wrote its section of {path} and its plots", flush=True)


def write_adapters_report(results, out_dir, smoke, notes_path):
    """Part 3's section: one row per way of fine-tuning, and its two plots."""
    tunings = [f for f in FINE_TUNINGS if any(r["method"] == f[0] for r in results)]
    by = {f[0]: [r for r in results if r["method"] == f[0]] for f in tunings}
    seeds = sorted({r["seed"] for r in results})
    steps = steps_run(results)
    base_method = SMOKE["adapter_base"] if smoke else ADAPTER_BASE
    base_label = next(m[1] for m in METHODS if m[0] == base_method)
    lines = [ADAPTERS_BEGIN, "", "# Results: fine-tuning through adapters" + (" (smoke run)" if smoke else ""), "",
             "Written by `python3 scripts/lm_study.py`" + (" --smoke" if smoke else "") +
             "; every number below comes from its runs.", ""]
    add = lines.append
    lora = ", ".join(f"{k} {v}" for k, v in LORA.items() if k != "targets")
    model = example()["model"]
    # Per block r (in + out) over c_attn (e, 3e), attn.c_proj (e, e), mlp.c_fc (e, 4e) and mlp.c_proj (4e, e): 16 r e.
    adapter_parameters = 16 * LORA["r"] * model["n_embd"] * model["n_layer"]
    add(f"**Setup.** The fortunes GPTs pretrained above with {base_label} (one per seed) fine-tuned on the licence "
        f"texts ({LICENCE_TEST} held out) for {steps} steps{'' if smoke else ' (one epoch)'}, batch and schedule as part 2's, five ways: full "
        f"fine-tuning (part 2's recipe, its runs made again with this part's: AdamW lr {FINE_TUNE['optimizer']['lr']}, weight decay "
        f"{FINE_TUNE['optimizer']['weight_decay']}); LoRA ({lora}, dropout 0, on every projection of every block: "
        f"`{LORA['targets']}`, {4 * model['n_layer']} matrices, {adapter_parameters} parameters trained) with AdamW at lr {ADAPTER_LR} and no weight decay, the base frozen; "
        f"and SAM, Flat-LoRA and Bi-LoRA over those adapters, rho 0.05 each (their papers' value; the rest their "
        f"defaults, docs/sam-family.md). Licences loss: nats per byte on {LICENCE_TEST} after fine-tuning; "
        f"forgetting: the rise of the fortunes validation loss (`wisdom`) from the pretrained model's; training "
        f"seconds of the fine-tuning alone. Mean ± sd over seeds {', '.join(map(str, seeds))} (the seed draws "
        f"the pretrained model, the adapters' start, the noise and the batch order). One thread per run, two runs "
        f"at a time on 2 cores.")
    add("")
    add("| fine-tuning | keys | licences loss, before → after | fortunes loss after "
        "| rise (forgetting) | training s | time / LoRA |")
    add("| --- | --- | --- | --- | --- | --- | --- |")
    lora_s = statistics.mean(r["seconds"] for r in by["lora"]) if "lora" in by else float("nan")
    for name, label, algorithms in tunings:
        runs = by[name]
        keys = "none" if algorithms is None else "`adapters.lora`" + (f", `{json.dumps(algorithms)}`" if algorithms else "")
        seconds = statistics.mean(r["seconds"] for r in runs)
        add(f"| {label} | {keys} | "
            f"{fmt([r['licences_before'] for r in runs])} → {fmt([r['licences'] for r in runs])} | "
            f"{fmt([r['fortunes_after'] for r in runs])} | {fmt([r['fortunes_after'] - r['fortunes'] for r in runs])} | "
            f"{seconds:.0f} | {seconds / lora_s:.2f} |")
    add("")
    series = [(t[1], by[t[0]]) for t in tunings]
    curves_plot(out_dir, "ft_loss.png", "fine-tuning the fortunes GPT on the licences: training loss (mean over seeds)",
                series)
    bar_panels(out_dir, "ft_forgetting.png", "nats per byte (mean ± sd over seeds)", series,
               ("licences validation loss after fine-tuning", lambda r: r["licences"], "#40a060"),
               ("fortunes validation loss: rise (forgetting)", lambda r: r["fortunes_after"] - r["fortunes"]))
    close_section(lines, [("ft_loss.png", "fine-tuning loss per step on the licences"),
                          ("ft_forgetting.png", "licences loss after fine-tuning, and the fortunes loss's rise")],
                  notes_path, smoke, out_dir, (ADAPTERS_BEGIN, ADAPTERS_END))


def curves_plot(out_dir, output, title, series):
    """Each (label, runs) of series as its runs' mean training loss per step, one line each."""
    data = os.path.join(out_dir, output + ".dat")
    with open(data, "w") as f:
        for _, runs in series:
            curves = [dict(r["curve"]) for r in runs]
            for step in sorted(set.intersection(*(set(c) for c in curves))):
                f.write(f"{step} {statistics.mean(c[step] for c in curves)}\n")
            f.write("\n\n")
    plot = ", ".join(f"'{output}.dat' index {i} with lines lw 2 title '{label}'" for i, (label, _) in enumerate(series))
    gnuplot(out_dir, output, title, "step", "loss (nats per byte)", f"set key top right\nset yrange [*:*]\nplot {plot}")
    os.remove(data)


def bar_panels(out_dir, output, title, series, left, right):
    """Two bar panels side by side, mean ± sd over each (label, runs) of series. left is (panel title,
    value of a run, colour), right (panel title, value of a run). The left panel starts just under its
    lowest bar (the differences are hundredths of a nat); the right one spans zero and its bars."""
    data = os.path.join(out_dir, output + ".dat")
    with open(data, "w") as f:
        lows, spans = [], [0.0]
        for label, runs in series:
            value, sd_value = mean_sd([left[1](r) for r in runs])
            other, sd_other = mean_sd([right[1](r) for r in runs])
            lows.append(value - sd_value)
            spans += [other - sd_other, other + sd_other]
            f.write(f"\"{label}\" {value} {sd_value} {other} {sd_other}\n")
    gnuplot(out_dir, output, "", "", "",
            "set style data histogram\nset style histogram errorbars gap 1 lw 1\nset style fill solid 0.6 border -1\n"
            f"unset key\nset xtics rotate by -30 scale 0\nset bmargin 7\nset multiplot layout 1,2 title '{title}'\n"
            f"set title '{left[0]}'\nset yrange [{min(lows) - 0.05}:*]\n"
            f"plot '{output}.dat' using 2:3:xtic(1) lc rgb '{left[2]}'\n"
            f"set title '{right[0]}'\nset yrange [{min(0.0, 1.1 * min(spans))}:{1.1 * max(spans)}]\nset xzeroaxis lw 1\n"
            f"plot '{output}.dat' using 4:5:xtic(1) lc rgb '#c04040'\nunset multiplot", size="1000,520")
    os.remove(data)


def close_section(lines, images, notes_path, smoke, out_dir, markers):
    """The section's plots (file, caption), its hand-written notes and end marker; then written in place."""
    for image, caption in images:
        lines += [f"![{caption}]({image})", ""]
    lines += notes_section(notes_path, smoke)
    lines.append(markers[1])
    write_section(os.path.join(out_dir, "results.md"), markers[0], markers[1], lines)


def main():
    parser = study_arguments(__doc__.split("\n\n")[0], ("runs/lm-study", "lm-runs"))
    parser.add_argument("--part", choices=["all", "pretraining", "adapters"], default="all",
                        help="pretraining (with the forgetting after plain fine-tuning), adapters, or both (default)")
    args = parser.parse_args()
    root = args.runs or (os.path.join(args.out, "lm-runs") if args.smoke else os.path.join("runs", "lm-study"))
    seeds = SMOKE["seeds"] if args.smoke else SEEDS
    basin_train = os.path.abspath(args.basin_train)
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(args.out, exist_ok=True)
    if args.part in ("all", "pretraining"):
        methods = SMOKE["methods"] if args.smoke else [m[0] for m in METHODS]
        work = [(m, s) for s in seeds for m in methods]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda w: one_seed(*w, root, basin_train, args.smoke), work))
        write_report(results, args.out, args.smoke, os.path.join(here, "lm_study_notes.md"))
    if args.part in ("all", "adapters"):
        tunings = SMOKE["fine_tunings"] if args.smoke else [f[0] for f in FINE_TUNINGS]
        # Each seed's pretraining first (two at a time), then its fine-tunings.
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda s: fine_tune_one("full", s, root, basin_train, args.smoke), seeds))
            work = [(t, s) for s in seeds for t in tunings]
            results = list(pool.map(lambda w: fine_tune_one(*w, root, basin_train, args.smoke), work))
        write_adapters_report(results, args.out, args.smoke, os.path.join(here, "fine_tuning_notes.md"))


if __name__ == "__main__":
    sys.exit(main())
