#!/usr/bin/env python3
"""The label-noise study: SAM and its variants against SGD on Fashion-MNIST
with symmetric label noise on the training labels (the test labels clean).

Runs basin-train once per (method, noise rate, seed), two runs at a time
with one thread each, then writes docs/results.md and three PNG plots (with
gnuplot). A finished run is skipped when the study is started again, an
interrupted one resumes from its last checkpoint, and a status line says
which runs are going, how far, and about how long is left. The cost figures
come from a timing phase after the runs (each method one process at a time,
right after SGD), since two runs side by side time each other too.

  python3 scripts/study.py --basin-train build/programs/basin-train [--smoke] [--out docs]

scripts/study.sh builds basin-train and runs this. --smoke runs a tiny
version (a small subset, 2 epochs, 1 seed, few methods) in seconds, for the
tests. Only the Python standard library is used.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

# The setup every method shares (see docs/results.md for why these values).
BASE_CONFIG = {
    "threads": 1,
    "max_epochs": 30,
    "log_every": 1000,
    "data": {"name": "fashion_mnist", "batch_size": 128, "train_subset": 10000, "eval_batch_size": 2000},
    "model": {"name": "mlp", "hidden": [256, 256]},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "schedulers": [{"name": "cosine_warmup", "warmup": 0}],
    "callbacks": {"checkpoint": {"every_epochs": 5, "keep_last": 1}},
}

# name, label, "algorithms" object, epochs factor, expected cost over SGD (for the time estimate)
METHODS = [
    ("sgd", "SGD", {}, 1, 1.0),
    ("sgd_2x", "SGD, 2x epochs", {}, 2, 2.0),
    ("sam", "SAM", {"sam": {"rho": 0.1}}, 1, 2.0),
    ("asam", "ASAM", {"asam": {"rho": 0.5}}, 1, 2.0),
    ("gsam", "GSAM", {"gsam": {"rho": 0.1, "alpha": 0.4}}, 1, 2.0),
    ("looksam", "LookSAM", {"looksam": {"rho": 0.1, "k": 5}}, 1, 1.2),
    ("momentum_sam", "Momentum-SAM", {"momentum_sam": {"rho": 0.3}}, 1, 1.0),
    ("late_sam", "late-phase SAM", {"sam": {"rho": 0.1, "start": 0.5}}, 1, 1.5),
    ("msam", "mSAM (m 4)", {"msam": {"rho": 0.1}}, 1, 1.9),  # the best of the screen below on its seed
    # One pass at w + e, e random per row (their gamma picked from the screen's 0.01, 0.05, 0.1 on seed 0).
    ("rwp", "RWP", {"rwp": {"gamma": 0.05}}, 1, 1.1),
    ("arwp", "ARWP", {"arwp": {"gamma": 0.05}}, 1, 1.1),
    # The other variants, one seed each: a screen, to see whether one of them
    # beats the ones above (rho 0.1 as SAM's here, else their defaults).
    ("esam", "ESAM", {"esam": {"rho": 0.1}}, 1, 1.8),
    ("saf", "SAF", {"saf": {"start_epoch": 5}}, 1, 1.0),
    ("wsam", "WSAM", {"wsam": {"rho": 0.1}}, 1, 2.0),
    ("friendly_sam", "Friendly-SAM", {"friendly_sam": {"rho": 0.1}}, 1, 2.0),
    ("fisher_sam", "Fisher-SAM", {"fisher_sam": {"rho": 0.1}}, 1, 2.0),
    ("vasso", "VaSSO", {"vasso": {"rho": 0.1}}, 1, 2.0),
    ("ae_sam", "AE-SAM", {"ae_sam": {"rho": 0.1}}, 1, 1.2),
    ("mesa", "MESA", {"mesa": {"start_epoch": 5}}, 1, 1.5),
    ("gcsam", "GCSAM", {"gcsam": {"rho": 0.1}}, 1, 2.0),
    ("rwp_gamma_0.01", "RWP (gamma 0.01)", {"rwp": {"gamma": 0.01}}, 1, 1.1),  # their papers' default
    ("rwp_gamma_0.1", "RWP (gamma 0.1)", {"rwp": {"gamma": 0.1}}, 1, 1.1),
]
SWEEP_METHODS = ["sgd", "sam"]  # run at every noise rate
SCREEN_METHODS = ["esam", "saf", "wsam", "friendly_sam", "fisher_sam", "vasso", "ae_sam", "mesa", "gcsam",
                  "rwp_gamma_0.01", "rwp_gamma_0.1"]
# The MLP uses each weight once per sample, so drawing a random perturbation
# (a normal per weight a step) costs there nearly what its step does; basin's
# small CNN reuses its filters at every position. The one-pass methods'
# cost question is asked again on it: the same data, keys and seeds.
CNN_CHECK = {"model": {"name": "cnn"}, "methods": ["sgd", "sam", "rwp", "arwp"]}  # every seed, main noise


ADAPTERS_ONLY = {"flat_lora", "bi_lora"}  # they train low-rank adapters, which the study's MLP has none of


def add_registered_variants(basin_train):
    """Every SAM-family variant basin-train registers and METHODS lacks joins the
    screen (rho 0.1 as SAM's, else its defaults): a new variant is studied at once."""
    listed = subprocess.run([basin_train, "--list-algorithms"], check=True, capture_output=True, text=True)
    known = {name for name, *_ in METHODS}
    for name in json.loads(listed.stdout)["sam_family"]:
        if name not in known and name not in ADAPTERS_ONLY:
            METHODS.append((name, name, {name: {"rho": 0.1}}, 1, 2.0))
            SCREEN_METHODS.append(name)
CALIBRATION_EPOCHS = 10  # of each method, after SGD's, for the cost figures (an MLP epoch is a fifth of a second)
NOISE_RATES = [0.0, 0.2, 0.4, 0.6]
MAIN_NOISE = 0.4
SEEDS = [0, 1, 2]

SMOKE = {
    "base": {"max_epochs": 2, "data": {"train_subset": 512, "eval_batch_size": 1000}},
    "methods": ["sgd", "sam", "looksam", "ae_sam"],
    "cnn_methods": ["sgd", "rwp"],
    "noise_rates": [0.0, 0.4],
    "seeds": [0],
}


def merged(base, extra):
    """A deep copy of base with extra's keys laid over it (nothing shared with either)."""
    out = json.loads(json.dumps(base))
    for key, value in extra.items():
        out[key] = (merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict)
                    else json.loads(json.dumps(value)))
    return out


class Run:
    def __init__(self, method, noise, seed, root, base):
        name, label, algorithms, factor, cost = next(m for m in METHODS if m[0] == method)
        self.method, self.label, self.noise, self.seed, self.cost = method, label, noise, seed, cost * factor
        self.dir = os.path.join(root, method, f"noise-{noise:.1f}", f"seed-{seed}")
        config = merged(base, {"seed": seed, "algorithms": algorithms, "data": {"label_noise": noise}})
        config["max_epochs"] = base["max_epochs"] * factor
        self.config = config
        self.base = base
        self.epochs = config["max_epochs"]

    def title(self):
        return f"{self.method} noise {self.noise:.1f} seed {self.seed}"

    def done(self):
        path = os.path.join(self.dir, "summary.json")
        if not os.path.exists(path):
            return False
        with open(path) as f:
            return not json.load(f).get("interrupted", False)

    def epochs_done(self):
        return len(self.epoch_records())

    def epoch_records(self):
        path = os.path.join(self.dir, "metrics.jsonl")
        if not os.path.exists(path):
            return []
        records = []
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption
                if "test_accuracy" in record:
                    records.append(record)
        return records

    def execute(self, basin_train):
        os.makedirs(self.dir, exist_ok=True)
        config_path = os.path.join(self.dir, "study-config.json")
        with open(config_path, "w") as f:
            json.dump(self.config, f, indent=1)
        command = [basin_train, "--run-dir", self.dir, "--log-level", "warn"]
        checkpoints = os.path.join(self.dir, "checkpoints")
        if os.path.isdir(checkpoints) and any(n.endswith(".pt") for n in os.listdir(checkpoints)):
            command += ["--resume", "latest"]  # an interrupted run continues
        else:
            command += ["--config", config_path, "--overwrite"]
        with open(os.path.join(self.dir, "log.txt"), "a") as log:
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
        if result.returncode == 75:  # stopped by a signal after writing a checkpoint
            raise RuntimeError(f"{self.title()}: interrupted (a checkpoint holds it; start the study again to go on)")
        if result.returncode != 0:
            raise RuntimeError(f"{self.title()}: basin-train exited with {result.returncode}; see {self.dir}/log.txt")


def plan(root, smoke):
    base = merged(BASE_CONFIG, SMOKE["base"]) if smoke else BASE_CONFIG
    methods = SMOKE["methods"] if smoke else [m[0] for m in METHODS]
    noise_rates = SMOKE["noise_rates"] if smoke else NOISE_RATES
    seeds = SMOKE["seeds"] if smoke else SEEDS
    runs = []
    for method in methods:
        for noise in noise_rates if method in SWEEP_METHODS else [MAIN_NOISE]:
            for seed in seeds[:1] if method in SCREEN_METHODS else seeds:
                runs.append(Run(method, noise, seed, root, base))
    return runs


def cnn_plan(root, smoke):
    """CNN_CHECK's runs: the main noise rate, every seed, the MLP replaced by the CNN."""
    base = merged(BASE_CONFIG, SMOKE["base"]) if smoke else merged(BASE_CONFIG, {})
    base["model"] = dict(CNN_CHECK["model"])
    seeds = SMOKE["seeds"] if smoke else SEEDS
    methods = SMOKE["cnn_methods"] if smoke else CNN_CHECK["methods"]
    return [Run(method, MAIN_NOISE, seed, os.path.join(root, "cnn"), base) for method in methods for seed in seeds]


def minutes(seconds):
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def run_all(runs, basin_train, jobs):
    pending = [r for r in runs if not r.done()]
    total_cost = sum(r.cost for r in pending)
    print(f"study: {len(runs)} runs, {len(runs) - len(pending)} already done, {len(pending)} to run, {jobs} at a time",
          flush=True)
    lock = threading.Lock()
    state = {"running": [], "done_cost": 0.0, "started": time.time(), "errors": []}

    def worker():
        while True:
            with lock:
                if not pending or state["errors"]:
                    return
                run = pending.pop(0)
                state["running"].append(run)
            try:
                start = time.time()
                run.execute(basin_train)
                records = run.epoch_records()
                final = records[-1]["test_accuracy"] if records else float("nan")
                with lock:
                    state["done_cost"] += run.cost
                    print(f"study: done {run.title()}: test accuracy {100 * final:.1f}% in {minutes(time.time() - start)}",
                          flush=True)
            except Exception as error:  # stop the study; finished runs stay
                with lock:
                    state["errors"].append(str(error))
            finally:
                with lock:
                    state["running"].remove(run)

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=30)
        with lock:
            if state["running"]:
                elapsed = time.time() - state["started"]
                # Cost units done, counting the running runs' finished epochs.
                partial = sum(r.cost * r.epochs_done() / r.epochs for r in state["running"])
                done = state["done_cost"] + partial
                left = elapsed / done * (total_cost - done) if done > 0 else float("nan")
                going = ", ".join(f"{r.title()} (epoch {r.epochs_done()}/{r.epochs})" for r in state["running"])
                estimate = minutes(left) if left == left else "unknown"
                print(f"study: running {going}; {minutes(elapsed)} elapsed, about {estimate} left", flush=True)
    if state["errors"]:
        sys.exit("study: " + "; ".join(state["errors"]))


def calibrate(runs, root, basin_train, epochs, report_only=False):
    """Seconds per training epoch of each method, measured one process at a
    time after the runs, each right after an SGD run of the same length: the
    runs' own timings depend on what ran beside them (and on anything else on
    the machine then), these do not. Kept in ROOT/calibration.json."""
    path = os.path.join(root, "calibration.json")
    methods = sorted({r.method for r in runs}, key=[m[0] for m in METHODS].index)
    measured = {}
    if os.path.exists(path):
        with open(path) as f:
            measured = json.load(f)
    # A method that starts late is timed from its start (older files timed its plain epochs too); a
    # timing over another number of epochs than this study's is redone.
    todo = [m for m in methods if m not in measured or measured[m].get("epochs") != epochs
            or (delayed(m) and not measured[m].get("from_start"))]
    if not todo:
        return measured
    if report_only:
        sys.exit(f"study: {', '.join(todo)} not timed yet ({path}); run the study without --report-only")
    print(f"study: timing {len(todo)} method(s) one at a time, each after SGD ({epochs} epoch(s) each)", flush=True)
    template = next(r for r in runs if r.method == "sgd")
    for method in todo:
        seconds = {}
        for name in ("sgd", method):
            run = Run(name, MAIN_NOISE, 0, os.path.join(root, "calibration"), template.base)
            run.dir = os.path.join(root, "calibration", f"{method}-{name}")
            shutil.rmtree(run.dir, ignore_errors=True)
            run.config["max_epochs"] = epochs  # the same epochs for every method, sgd_2x's included
            run.epochs = epochs
            for keys_of in run.config["algorithms"].values():  # timed as it runs once started
                if "start" in keys_of:
                    keys_of["start"] = 0
                if "start_epoch" in keys_of:
                    keys_of["start_epoch"] = -1  # the term is on in epochs after start_epoch
            run.execute(basin_train)
            seconds[name] = statistics.mean(r["train_seconds"] for r in run.epoch_records())
        measured[method] = {"seconds_per_epoch": seconds[method], "over_sgd": seconds[method] / seconds["sgd"],
                            "from_start": True, "epochs": epochs}
        print(f"study: timed {method}: {seconds[method]:.2f} s an epoch, {measured[method]['over_sgd']:.2f} of SGD's",
              flush=True)
        with open(path, "w") as f:
            json.dump(measured, f, indent=1)
    return measured


# ---------------------------------------------------------------- the report


def mean_spread(values):
    if not values:
        return float("nan"), float("nan")
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(runs):
    """Per (method, noise): final and peak accuracy, epoch curves, seconds."""
    groups = {}
    for run in runs:
        records = run.epoch_records()
        if not records:
            continue
        g = groups.setdefault((run.method, run.noise), {"label": run.label, "runs": []})
        g["runs"].append({
            "final": records[-1]["test_accuracy"],
            "peak": max(r["test_accuracy"] for r in records),
            "curve": [r["test_accuracy"] for r in records],
            "seconds": [r.get("train_seconds", float("nan")) for r in records],
        })
    return groups


def seconds_text(seconds):
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def fmt(mean, spread):
    return f"{100 * mean:.1f} ± {100 * spread:.1f}"


def first_reach(run, target):
    """Epochs until the test accuracy first reaches target, or None."""
    for epoch, accuracy in enumerate(run["curve"], 1):
        if accuracy >= target:
            return epoch
    return None


def keys(method):
    """The method's "algorithms" object as the config has it, for the tables."""
    name, _, algorithms, factor, _ = next(m for m in METHODS if m[0] == method)
    text = f"`{json.dumps(algorithms)}`" if algorithms else "none"
    return text + (f", {factor}x epochs" if factor != 1 else "")


README_BEGIN = "<!-- study tables: written by scripts/study.sh from its runs -->"
README_END = "<!-- end of study tables -->"


def glance(groups, noise_rates, sweep, table, main, over, target, screened):
    """README's short version of the results: the noise sweep's final
    accuracies, then every method at the main noise rate."""
    lines = []
    if sweep:
        lines.append("| final test accuracy (%) | " + " | ".join(f"{100 * n:.0f}% noise" for n in noise_rates) + " |")
        lines.append("| --- | " + " | ".join("---" for _ in noise_rates) + " |")
        for m in sweep:
            cells = [fmt(*mean_spread([r["final"] for r in groups[(m, n)]["runs"]])) for n in noise_rates]
            shown = keys(m) if m != "sgd" else ""
            lines.append(f"| {groups[(m, noise_rates[0])]['label']}{f' ({shown})' if shown else ''} | "
                         + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"| at {100 * main:.0f}% noise | keys | final test accuracy (%) | cost / SGD | time to reach SGD's best |")
    lines.append("| --- | --- | --- | --- | --- |")
    for m, label, _, cost, reach in table:
        final = fmt(*mean_spread([r["final"] for r in groups[(m, main)]["runs"]]))
        lines.append(f"| {label} | {keys(m)} | {final} | {cost:.2f} | {reach} |")
    lines.append("")
    lines.append(f"Mean ± standard deviation over {over}. Cost / SGD: training time over SGD's, each method timed "
                 f"alone. Time to reach SGD's best: training time until the clean test accuracy first reaches the "
                 f"mean of SGD's per-seed peaks ({100 * target:.1f}%; picked with the test set, so optimistic), for "
                 f"the seeds that do." + (f" A screen of {len(screened)} more (the other variants, and RWP at other "
                                           f"gammas), one seed each, is in docs/results.md." if screened else ""))
    return "\n".join(lines)


def update_readme(path, text):
    """Replaces what lies between README's study markers with text."""
    with open(path) as f:
        readme = f.read()
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        sys.exit(f"study: {path} has no '{README_BEGIN}' ... '{README_END}' block to write the tables into")
    readme = readme[:begin + len(README_BEGIN)] + "\n" + text + "\n" + readme[end:]
    with open(path, "w") as f:
        f.write(readme)
    print(f"study: wrote the tables into {path}", flush=True)


# Thirteen lines must stay apart: the baselines dark, SAM and its two-pass
# variants solid, the cheaper ones dashed.
LINE_STYLES = {
    "sgd": "lw 3 lc rgb 'black'",
    "sgd_2x": "lw 2 lc rgb 'gray50' dt 2",
    "sam": "lw 3 lc rgb '#0072b2'",
    "asam": "lw 2 lc rgb '#e69f00'",
    "gsam": "lw 2 lc rgb '#009e73'",
    "looksam": "lw 2 lc rgb '#56b4e9' dt 2",
    "momentum_sam": "lw 2 lc rgb '#d55e00' dt 2",
    "late_sam": "lw 2 lc rgb '#cc79a7' dt 4",
    "esam": "lw 2 lc rgb '#6b6b00' dt 5",
    "saf": "lw 2 lc rgb '#9400d3' dt 3",
    "msam": "lw 2 lc rgb '#882255'",
    "rwp": "lw 2 lc rgb '#44aa99' dt 2",
    "arwp": "lw 2 lc rgb '#999933' dt 4",
}


def seed_final(runs, method, noise, seed):
    """The final accuracy of one run, or None when it has not run."""
    for run in runs:
        if run.method == method and run.noise == noise and run.seed == seed:
            records = run.epoch_records()
            return records[-1]["test_accuracy"] if records else None
    return None


def plain_epochs(method, total_epochs):
    """Epochs a method runs as plain SGD before it starts: late-phase SAM's
    `start` (a fraction of the run); SAF's and MESA's term is on in the
    epochs after `start_epoch`, counted from 0."""
    for keys_of in next(m for m in METHODS if m[0] == method)[2].values():
        if isinstance(keys_of.get("start"), float):
            return keys_of["start"] * total_epochs
        if "start_epoch" in keys_of:
            return min(keys_of["start_epoch"] + 1, total_epochs)
    return 0


def delayed(method):
    return plain_epochs(method, 1e9) > 0


def training_seconds(method, epochs, total_epochs, timing):
    """Calibrated training seconds of a run's first `epochs` epochs: the
    plain ones at SGD's seconds, the others at the method's (the runs' own
    clocks would say more, but they move with what ran beside them)."""
    plain = plain_epochs(method, total_epochs)
    return (min(epochs, plain) * timing["sgd"]["seconds_per_epoch"]
            + max(0.0, epochs - plain) * timing[method]["seconds_per_epoch"])


def cost_over_sgd(method, total_epochs, sgd_epochs, timing):
    """The run's training time over SGD's, from each method's own pair ratio
    (the method timed right after SGD)."""
    plain = plain_epochs(method, total_epochs)
    return (plain + (total_epochs - plain) * timing[method]["over_sgd"]) / sgd_epochs


def line_colour(method):
    """The `lc rgb '...'` of the method's line style, for its points."""
    style = LINE_STYLES.get(method, "")
    return style[style.index("lc"):].split(" dt ")[0] if "lc" in style else ""


def gnuplot(out_dir, output, title, xlabel, ylabel, commands, size="800,520"):
    """Draws `output` (a PNG in out_dir) with gnuplot: the frame, then `commands`."""
    script = f"""set terminal pngcairo size {size} font 'DejaVu Sans,11'
set output '{output}'
set title '{title}'
set xlabel '{xlabel}'
set ylabel '{ylabel}'
set grid
{commands}
"""
    subprocess.run(["gnuplot"], input=script, text=True, cwd=out_dir, check=True)


# Where scripts/lm_study.py's sections of results.md begin: this study rewrites what comes before the first.
OTHER_STUDIES = ("<!-- language-model study", "<!-- fine-tuning study")


def kept_sections(path):
    """The other studies' sections of results.md (from the first of OTHER_STUDIES on), kept when this one
    rewrites its own."""
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        text = f.read()
    found = [at for at in (text.find(marker) for marker in OTHER_STUDIES) if at >= 0]
    return "\n" + text[min(found):] if found else ""


def write_report(runs, out_dir, smoke, notes_path, timing, readme=None, cnn=None):
    os.makedirs(out_dir, exist_ok=True)
    groups = summarize(runs)
    noise_rates = sorted({n for (_, n) in groups})
    main = MAIN_NOISE if any(n == MAIN_NOISE for n in noise_rates) else noise_rates[-1]
    methods = [m for m in [m[0] for m in METHODS] if (m, main) in groups and m not in SCREEN_METHODS]
    screened = [m for m in SCREEN_METHODS if (m, main) in groups]
    seeds = sorted({r.seed for r in runs})
    over = f"{len(seeds)} seed" + ("s" if len(seeds) > 1 else "")
    lines = []
    add = lines.append
    add("# Results: SAM and its variants under label noise" + (" (smoke run)" if smoke else ""))
    add("")
    add("Written by `bash scripts/study.sh`" + (" --smoke" if smoke else "") + "; every number below comes from its runs.")
    add("")
    kept = kept_sections(os.path.join(out_dir, "results.md"))
    following = [link for marker, link in zip(OTHER_STUDIES, (
        "[SAM on a small language model, and forgetting](#results-sam-on-a-small-language-model-and-forgetting)",
        "[fine-tuning through adapters](#results-fine-tuning-through-adapters)")) if marker in kept]
    if following:
        add(("Two studies follow" if len(following) > 1 else "A second study follows") + " this one "
            "(`scripts/lm_study.py`): " + ", and ".join(following) + ".")
        add("")
    config = runs[0].config
    add(f"**Setup.** Fashion-MNIST (the Debian package), a {config['data']['train_subset']}-sample training subset "
        f"with symmetric label noise (each training label replaced, with the given probability, by a different class "
        f"drawn uniformly; the 10000 test labels clean). An MLP with hidden layers {config['model']['hidden']}, "
        f"SGD with momentum {config['optimizer']['momentum']}, lr {config['optimizer']['lr']} with a cosine schedule "
        f"to 0, weight decay {config['optimizer']['weight_decay']}, batch {config['data']['batch_size']}, "
        f"{BASE_CONFIG['max_epochs'] if not smoke else config['max_epochs']} epochs for every method but \"SGD, 2x "
        f"epochs\" (twice as many: the SAM paper's fair-compute baseline). Seeds {', '.join(map(str, seeds))} (the "
        f"seed draws the "
        f"subset, the noise, the initial weights and the batch order). Mean ± standard deviation over the seeds. One "
        f"thread per run, two runs at a time on a 2-core machine.")
    add("")
    add("**Final** is the clean test accuracy after the last epoch. **Peak** is the best epoch's: it picks the "
        "epoch with the test set, so it is an optimistic number, shown only to say what early stopping could reach.")
    add("")
    # Noise sweep.
    sweep = [m for m in SWEEP_METHODS if all((m, n) in groups for n in noise_rates)]
    if sweep:
        add("## Accuracy against the noise rate")
        add("")
        add("| noise | " + " | ".join(f"{groups[(m, noise_rates[0])]['label']} final | peak" for m in sweep) + " |")
        add("| --- | " + " | ".join("--- | ---" for _ in sweep) + " |")
        for n in noise_rates:
            cells = []
            for m in sweep:
                g = groups[(m, n)]["runs"]
                cells.append(fmt(*mean_spread([r["final"] for r in g])) + " | " + fmt(*mean_spread([r["peak"] for r in g])))
            add(f"| {100 * n:.0f}% | " + " | ".join(cells) + " |")
        add("")
        add("![test accuracy against noise rate](noise.png)")
        add("")
        with open(os.path.join(out_dir, "noise.dat"), "w") as f:
            for n in noise_rates:
                row = [f"{100 * n:.0f}"]
                for m in sweep:
                    row += [f"{100 * v:.3f}" for v in mean_spread([r["final"] for r in groups[(m, n)]["runs"]])]
                f.write(" ".join(row) + "\n")
        series = ", ".join(
            f"'noise.dat' using ($1{'+0.6' if i else '-0.6'}):{2 + 2 * i}:{3 + 2 * i} with yerrorlines lw 2 pt 7 "
            f"title '{groups[(m, noise_rates[0])]['label']} (final, mean ± sd over {over})'"
            for i, m in enumerate(sweep))
        xtics = ", ".join(f"'{100 * n:.0f}' {100 * n:.0f}" for n in noise_rates)
        gnuplot(out_dir, "noise.png", "Fashion-MNIST, label noise on the training set: clean test accuracy",
                "label noise (% of training labels replaced)", "test accuracy (%)",
                f"""set xrange [-5:{100 * noise_rates[-1] + 5:.0f}]
set xtics ({xtics})
set key bottom left box opaque
plot {series}""")

    # Every method at the main noise rate.
    sgd = groups.get(("sgd", main))
    target = statistics.mean(r["peak"] for r in sgd["runs"]) if sgd else float("nan")
    calibration_epochs = 1 if smoke else CALIBRATION_EPOCHS
    add(f"## Every method at {100 * main:.0f}% noise")
    add("")
    add(f"Seconds are training time (evaluation aside) per epoch, measured after the runs one process at a time, "
        f"each method right after SGD over {calibration_epochs} epoch{'s' if calibration_epochs > 1 else ''} (the runs' own clocks "
        f"depend on what ran beside them); the totals are those times the method's epochs. \"Cost / SGD\" is the "
        f"method's time over that of the SGD run timed right before it, so it can differ from the ratio of the "
        f"seconds columns: the SGD runs' timings move by up to a fifth between pairs here (an epoch of this MLP "
        f"takes a fifth of a second), so costs within 0.2 of each other do not order two methods. "
        f"\"Reaches SGD's best\": the training time until the test accuracy first "
        f"reaches SGD's best, the mean of its seeds' peaks ({100 * target:.1f}%, itself picked with the test set; "
        f"the seeds peak at different epochs, so it lies above the top of SGD's mean curve), "
        f"for the seeds that do. The methods that start late (late-phase SAM, SAF, MESA) are timed once started; "
        f"their epochs before count at SGD's seconds. AE-SAM's timing run spans its threshold schedule over "
        f"{calibration_epochs} epochs.")
    add("")
    add("| method | keys | final | peak | s / epoch | total s | cost / SGD | reaches SGD's best |")
    add("| --- | --- | --- | --- | --- | --- | --- | --- |")
    table = []
    for m in methods:
        g = groups[(m, main)]
        finals = [r["final"] for r in g["runs"]]
        peaks = [r["peak"] for r in g["runs"]]
        epochs = len(g["runs"][0]["curve"])
        total_s = training_seconds(m, epochs, epochs, timing)
        epoch_s = total_s / epochs
        reach = [first_reach(r, target) for r in g["runs"]]
        reached = [training_seconds(m, e, epochs, timing) for e in reach if e is not None]
        reach_text = (f"{seconds_text(statistics.mean(reached))} ({len(reached)} of {len(reach)} seeds)" if reached
                      else "never")
        cost = cost_over_sgd(m, epochs, len(sgd["runs"][0]["curve"]), timing)
        table.append((m, g["label"], statistics.mean(finals), cost, reach_text))
        add(f"| {g['label']} | {keys(m)} | {fmt(*mean_spread(finals))} | {fmt(*mean_spread(peaks))} | {epoch_s:.2f} | "
            f"{total_s:.1f} | {cost:.2f} | {reach_text} |")
    add("")
    if screened:
        seed = min(r.seed for r in runs if r.method in screened)
        widest = max(max(r["final"] for r in groups[(m, main)]["runs"]) - min(r["final"] for r in groups[(m, main)]["runs"])
                     for m in methods)
        add("### The other variants, one seed")
        add("")
        on_seed = "; ".join(f"{groups[(m, main)]['label']} {100 * seed_final(runs, m, main, seed):.1f}"
                            for m in methods if seed_final(runs, m, main, seed) is not None)
        add(f"A screen: seed {seed} alone, rho 0.1 as SAM's here or the variant's default, and RWP at its papers' gamma "
            f"and at twice the one above (the keys say which). "
            f"Between seeds the final accuracy of the methods above moves by up to {100 * widest:.1f} points, so a "
            f"difference under that says little. The "
            f"methods above on seed {seed}: {on_seed}.")
        add("")
        add("| method | keys | final | peak | cost / SGD |")
        add("| --- | --- | --- | --- | --- |")
        for m in screened:
            run = groups[(m, main)]["runs"][0]
            add(f"| {groups[(m, main)]['label']} | {keys(m)} | {100 * run['final']:.1f} | {100 * run['peak']:.1f} | "
                f"{cost_over_sgd(m, len(run['curve']), len(sgd['runs'][0]['curve']), timing):.2f} |")
        add("")
    if cnn:
        lines += cnn_section(*cnn, main)
    add(f"![test accuracy per epoch at {100 * main:.0f}% noise](epochs.png)")
    add("")
    add(f"![accuracy against relative cost at {100 * main:.0f}% noise](cost.png)")
    add("")
    # SGD with twice the epochs would stretch the axis over the others: it is in the table.
    drawn = [m for m in methods if next(x for x in METHODS if x[0] == m)[3] == 1]
    curves = os.path.join(out_dir, "epochs.dat")
    with open(curves, "w") as f:
        for i, m in enumerate(drawn):
            g = groups[(m, main)]["runs"]
            length = min(len(r["curve"]) for r in g)
            for e in range(length):
                f.write(f"{e + 1} {100 * statistics.mean(r['curve'][e] for r in g):.3f}\n")
            f.write("\n\n")
    plots = ", ".join(f"'epochs.dat' index {i} with lines {LINE_STYLES.get(m, 'lw 2')} title '{groups[(m, main)]['label']}'"
                      for i, m in enumerate(drawn))
    plots += f", {100 * target:.3f} with lines lw 1 lc rgb 'black' dt 3 title 'SGD''s best (mean of its seeds'' peaks)'"
    longest = max(len(r["curve"]) for m in drawn for r in groups[(m, main)]["runs"])
    gnuplot(out_dir, "epochs.png", f"Clean test accuracy per epoch, {100 * main:.0f}% label noise (mean over {over})",
            "epoch", "clean test accuracy (%)", f"""set xtics {1 if longest <= 10 else 5}
set xrange [1:{longest}]
set key inside bottom right box opaque
set offsets 0, 0, 0, 5
plot {plots}""", size="900,560")
    # One series per method, in its line's colour with its own point shape and
    # a legend entry: labels beside the points would cover each other.
    with open(os.path.join(out_dir, "cost.dat"), "w") as f:
        for m, _, final, cost, _ in table:
            spread = mean_spread([r["final"] for r in groups[(m, main)]["runs"]])[1]
            f.write(f"{cost:.3f} {100 * final:.3f} {100 * spread:.3f}\n\n\n")
    shapes = [7, 5, 9, 11, 13, 15, 4, 6]  # circle, square, triangles, diamond, pentagon, open square, open circle
    points = ", ".join(
        f"'cost.dat' index {i} using 1:2:3 with yerrorbars pt {shapes[i % len(shapes)]} ps 1.8 "
        f"{line_colour(m)} title '{label}'" for i, (m, label, _, _, _) in enumerate(table))
    gnuplot(out_dir, "cost.png", f"Final clean test accuracy against cost, {100 * main:.0f}% label noise",
            "training time over SGD''s (timing runs of each method, one at a time)",
            f"final clean test accuracy (%, mean ± sd over {over})",
            f"""set offsets 0.1, 0.1, 1, 1
set key outside right
plot {points}""", size="900,520")
    if readme:
        update_readme(readme, glance(groups, noise_rates, sweep, table, main, over, target, screened))
    lines += notes_section(notes_path, smoke)
    path = os.path.join(out_dir, "results.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + kept)
    for name in ("noise.dat", "epochs.dat", "cost.dat"):
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            os.remove(path)
    print(f"study: wrote {os.path.join(out_dir, 'results.md')} and its plots", flush=True)


def cnn_section(runs, timing, main):
    """The report's lines for CNN_CHECK: final and peak accuracy and cost over SGD on the CNN."""
    groups = summarize(runs)
    methods = [m for m in CNN_CHECK["methods"] if (m, main) in groups]  # the smoke run's are among them
    seeds = sorted({r.seed for r in runs})
    sgd_epochs = len(groups[("sgd", main)]["runs"][0]["curve"])
    lines = ["### The one-pass methods on a CNN", "",
             f"The MLP uses each weight once per sample, so RWP's draw of a normal per weight a step costs there "
             f"nearly what the step does. The same runs with the MLP replaced by basin's small CNN "
             f"(`{json.dumps(CNN_CHECK['model'])}`: two 3x3 convolutions of 32 and 64 channels, a hidden layer of "
             f"128; models/cnn.cpp), which reuses its filters at every position; every other setting and key as "
             f"above, {len(seeds)} seed{'s' if len(seeds) > 1 else ''}, timed as above.", "",
             "| method on the CNN | keys | final | peak | s / epoch | cost / SGD |", "| --- | --- | --- | --- | --- | --- |"]
    for m in methods:
        g = groups[(m, main)]["runs"]
        epochs = len(g[0]["curve"])
        lines.append(f"| {groups[(m, main)]['label']} | {keys(m)} | {fmt(*mean_spread([r['final'] for r in g]))} | "
                     f"{fmt(*mean_spread([r['peak'] for r in g]))} | {timing[m]['seconds_per_epoch']:.2f} | "
                     f"{cost_over_sgd(m, epochs, sgd_epochs, timing):.2f} |")
    lines.append("")
    return lines


def notes_section(notes_path, smoke):
    """The hand-written "What it shows" from notes_path, as report lines (none for a smoke run)."""
    if not notes_path or not os.path.exists(notes_path) or smoke:
        return []
    with open(notes_path) as f:
        return ["## What it shows", "", f.read().strip(), ""]


def study_arguments(description, runs):
    """The options every study takes; `runs` names its default runs folder (and OUT/`smoke runs` for --smoke)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--basin-train", required=True, help="the basin-train executable")
    parser.add_argument("--out", default="docs", help="where results.md and the plots go (default: docs)")
    parser.add_argument("--runs", default=None, help=f"where the runs go (default: {runs[0]}, or OUT/{runs[1]} for --smoke)")
    parser.add_argument("--smoke", action="store_true", help="a tiny study in seconds (for the tests)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    return parser


def main():
    parser = study_arguments(__doc__.split("\n\n")[0], ("runs/study", "runs"))
    parser.add_argument("--report-only", action="store_true", help="write the report from the runs there are")
    parser.add_argument("--readme", default=None,
                        help="also write the short tables into this file, between its study markers")
    args = parser.parse_args()
    if shutil.which("gnuplot") is None:
        sys.exit("study: gnuplot is not installed (Debian package gnuplot-nox)")
    root = args.runs or (os.path.join(args.out, "runs") if args.smoke else os.path.join("runs", "study"))
    add_registered_variants(os.path.abspath(args.basin_train))
    runs = plan(root, args.smoke)
    cnn_runs = cnn_plan(root, args.smoke)
    if not args.report_only:
        try:
            run_all(runs + cnn_runs, os.path.abspath(args.basin_train), args.jobs)
        except KeyboardInterrupt:
            sys.exit("study: interrupted; the runs finished are kept and a running one resumes from its last "
                     "checkpoint when the study is started again")
    epochs = 1 if args.smoke else CALIBRATION_EPOCHS
    timing = calibrate(runs, root, os.path.abspath(args.basin_train), epochs, args.report_only)
    cnn = None  # runs from before the CNN's part have none: their report goes without it
    if all(r.done() for r in cnn_runs):
        cnn = (cnn_runs, calibrate(cnn_runs, os.path.join(root, "cnn"), os.path.abspath(args.basin_train), epochs,
                                   args.report_only))
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "study_notes.md")
    write_report(runs, args.out, args.smoke, notes, timing, args.readme, cnn)


if __name__ == "__main__":
    main()
