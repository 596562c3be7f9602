"""The conv nets' training images/s, float32 and bfloat16, against plain PyTorch in one run.

    python -m benchmarks.conv_precision
        [--models highway_conv16_mnist,highway_conv32_mnist,highway_a_cifar10,...]
        [--batch-size 100] [--steps 20] [--warmup 3] [--repeats 5] [--threads N]
        [--timeout 900] [--page DIR]

Issue 72's "bfloat16 where it is faster": every model given (default: NIPS 2015 Tables 1-3's
conv nets, the two MNIST and the four CIFAR-10 ones) x {float32, mixed_bfloat16} x
{highway_zoo (the zoo's Keras net on TensorFlow), pytorch (`implementations.torch_conv_highway`,
the same layers and parameter count, NCHW)}, each cell in a fresh process with
`benchmarks.conv_peer`'s training step (Nesterov SGD, softmax cross-entropy, dropout on, a
batch of random raw pixels copied from the host every step). `mixed_bfloat16` is Keras's mixed
policy (bfloat16 arithmetic, float32 variables) and PyTorch's `torch.autocast(dtype=bfloat16)`.
The precisions and frameworks are interleaved: every model's four cells once, then again,
`--repeats` times, so a noisy spell falls on all of them alike.

Reported from the one run, per model: each cell's median images/s over the repeats (each
repeat's own figure: its median step's) with the minimum and maximum; highway_zoo / pytorch
per precision and the bfloat16 speed-up (mixed_bfloat16 / float32) per framework, each a
ratio within a repeat, then their median, minimum and maximum. The goal is highway_zoo at
least 1.0x PyTorch in each precision. The JSON records the CPU (its model and flags: whether
it has avx512_bf16 or amx_bf16, without which bfloat16 is emulated, slowly), the versions, the
settings and each run's threads. A cell that fails or runs past `--timeout` seconds (a CPU
without bfloat16 kernels) is recorded with its error line and the run goes on; the exit status
is 1 only when a float32 cell failed. Fewer than 5 repeats or 10 timed steps is a smoke run:
the table says so in its first line.

Writes benchmarks/results/conv_precision.json, and conv_precision.md (the tables) and
conv_precision.png (grouped bars per model) beside it, or in `--page DIR`: the site's section
includes docs/results/bench/conv_precision.md, so the measurement for the site is
`python -m benchmarks.conv_precision --page docs/results/bench`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from benchmarks import conv_peer, driver

NAME = "conv_precision"
RESULTS = Path(__file__).resolve().parent / "results" / f"{NAME}.json"
# The site's benchmarks page, which includes the table (links in it are relative to it).
PAGE = driver.ROOT / "docs" / "results" / "benchmarks.md"
MODELS = ["highway_conv16_mnist", "highway_conv32_mnist", "highway_a_cifar10",
          "highway_b_cifar10", "highway_c_cifar10", "highway_cifar10"]
PRECISIONS = ("float32", "mixed_bfloat16")
IMPLEMENTATIONS = conv_peer.IMPLEMENTATIONS  # ("highway_zoo", "pytorch")
LABELS = {"highway_zoo": "highway-zoo (Keras, TensorFlow)", "pytorch": "PyTorch",
          "float32": "float32", "mixed_bfloat16": "bfloat16"}
GOAL = 1.0  # highway_zoo / pytorch, in each precision
SMOKE = {"repeats": 5, "steps": 10}  # fewer of either: a smoke run, not a measurement
# The /proc/cpuinfo flags that decide how bfloat16 runs: AVX-512 BF16 and AMX have bfloat16
# instructions (oneDNN uses them); plain AVX-512 and AVX2 convert to float32 and back.
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx512_fp16", "avx2", "fma",
              "bf16")
PACKAGES = ("tensorflow", "keras", "torch", "numpy")


# -- one cell, in its own process ----------------------------------------------------------


def measure(name: str, implementation: str, precision: str, batch_size: int, steps: int,
            warmup: int, threads: int | None = None) -> dict:
    """Runs in a fresh process: one framework's training steps on one model in one precision
    (`conv_peer.measure`), with `threads` intra-op threads where given; records the threads
    each framework ran with."""
    if implementation == "highway_zoo":
        import tensorflow as tf

        if threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        run = conv_peer.measure(name, implementation, batch_size, steps, warmup, precision)
        # 0: TensorFlow's default, one thread per core
        run["threads"] = {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                          "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}
        return run
    import torch

    if threads:
        torch.set_num_threads(threads)
    run = conv_peer.measure(name, implementation, batch_size, steps, warmup, precision)
    run["threads"] = {"intra_op": torch.get_num_threads(),
                      "inter_op": torch.get_num_interop_threads()}
    run["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return run


# -- the machine -------------------------------------------------------------------------------


def cpu_info(path: str | Path = "/proc/cpuinfo") -> dict:
    """The CPU's model name and flags (x86's "flags", ARM's "Features") from the first
    processor of `path`, the bfloat16-relevant flags one by one, and the cores."""
    model, flags = None, []
    try:
        text = Path(path).read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("model name", "Model name", "Processor") and model is None:
            model = value
        elif key in ("flags", "Features") and not flags:
            flags = value.split()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {"model": model or platform.processor() or platform.machine(),
            "architecture": platform.machine(), "cores": os.cpu_count(), "usable_cores": usable,
            "bf16_flags": {flag: flag in flags for flag in BF16_FLAGS},
            "flags": sorted(flags)}


def versions() -> dict:
    """Python's and the packages' versions, read without importing them."""
    out = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def has_bf16_instructions(cpu: dict) -> bool:
    return any(cpu["bf16_flags"].get(f) for f in ("avx512_bf16", "amx_bf16", "bf16"))


# -- the arithmetic ------------------------------------------------------------------------------


def spread(values: list[float]) -> dict | None:
    """{"median", "min", "max", "n"} of `values`; None when there are none."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def _ok(run: dict) -> bool:
    return "error" not in run


def paired(numerators: list[dict], denominators: list[dict]) -> list[float]:
    """The ratios of images/s within each repeat (the i-th run of each list), skipping a
    repeat where either run failed."""
    return [a["train_images_per_s"] / b["train_images_per_s"]
            for a, b in zip(numerators, denominators, strict=True) if _ok(a) and _ok(b)]


def summarise(name: str, runs: dict[tuple[str, str], list[dict]], params: int | None = None
              ) -> dict:
    """One model's row from its runs, {(precision, implementation): runs in repeat order}:
    each cell's images/s spread, highway_zoo / pytorch per precision and mixed_bfloat16 /
    float32 per implementation (ratios within a repeat, then their spread), whether the goal
    is met in each precision, and every failed run's error line."""
    images = {p: {i: spread([r["train_images_per_s"] for r in runs[(p, i)] if _ok(r)])
                  for i in IMPLEMENTATIONS} for p in PRECISIONS}
    ratio = {p: spread(paired(runs[(p, "highway_zoo")], runs[(p, "pytorch")]))
             for p in PRECISIONS}
    speedup = {i: spread(paired(runs[("mixed_bfloat16", i)], runs[("float32", i)]))
               for i in IMPLEMENTATIONS}
    failures = {f"{p}/{i}": [r["error"] for r in runs[(p, i)] if not _ok(r)]
                for p in PRECISIONS for i in IMPLEMENTATIONS}
    return {"model": name, "params": params, "images_per_s": images,
            "highway_zoo_over_pytorch": ratio, "bf16_speedup": speedup,
            "goal_met": {p: None if ratio[p] is None else ratio[p]["median"] >= GOAL
                         for p in PRECISIONS},
            "failures": {key: errors for key, errors in failures.items() if errors},
            "runs": {f"{p}/{i}": runs[(p, i)] for p in PRECISIONS for i in IMPLEMENTATIONS}}


# -- the table and the figure ------------------------------------------------------------------


def _images(cell: dict | None) -> str:
    if cell is None:
        return "failed"
    return f"{cell['median']:,.0f} ({cell['min']:,.0f}–{cell['max']:,.0f})"


def _ratio(cell: dict | None) -> str:
    if cell is None:
        return "–"
    return f"{cell['median']:.2f}x ({cell['min']:.2f}–{cell['max']:.2f})"


def format_tables(rows: list[dict]) -> str:
    """Two markdown tables: images/s and highway-zoo / PyTorch per model and precision; the
    bfloat16 speed-up per model and framework."""
    speed = driver.table(
        ["model", "precision", "highway-zoo img/s (min–max)", "PyTorch img/s (min–max)",
         "highway-zoo / PyTorch (min–max)", f"at least {GOAL:.1f}x"],
        [":---", ":---", "---:", "---:", "---:", ":---"],
        [[f"`{r['model']}`", p, _images(r["images_per_s"][p]["highway_zoo"]),
          _images(r["images_per_s"][p]["pytorch"]), _ratio(r["highway_zoo_over_pytorch"][p]),
          {True: "met", False: "not met", None: "–"}[r["goal_met"][p]]]
         for r in rows for p in PRECISIONS])
    speedup = driver.table(
        ["model", "bfloat16 / float32, highway-zoo (min–max)",
         "bfloat16 / float32, PyTorch (min–max)"],
        [":---", "---:", "---:"],
        [[f"`{r['model']}`", _ratio(r["bf16_speedup"]["highway_zoo"]),
          _ratio(r["bf16_speedup"]["pytorch"])] for r in rows])
    return f"{speed}\n\n{speedup}"


def _link(target: Path, page_file: Path) -> str:
    """`target` as a link from the text in `page_file`: relative to the site's benchmarks
    page when `page_file` is in its folder (the page includes it), the committed results as
    the site copies them (data/bench/NAME), else relative to `page_file`'s own folder."""
    target = Path(target).resolve()
    if page_file.resolve().is_relative_to(PAGE.parent):
        if target.parent == RESULTS.parent:
            return f"data/bench/{target.name}"
        return os.path.relpath(target, PAGE.parent)
    return os.path.relpath(target, page_file.resolve().parent)


def markdown(summary: dict, json_path: Path, md_path: Path, png_path: Path) -> str:
    """The table file: what was run where, the smoke-run mark, both tables, the goal's count
    and the figure."""
    s, cpu, v = summary["settings"], summary["cpu"], summary["versions"]
    rows = summary["results"]
    bf16 = ", ".join(f"{flag} {'yes' if cpu['bf16_flags'][flag] else 'no'}"
                     for flag in ("avx512_bf16", "amx_bf16"))
    threads = s["threads"] or "each framework's default"
    lines = [f"<!-- Written by `{summary['command']}` on {summary['date']}; "
             "not edited by hand. -->", ""]
    if summary["smoke"]:
        lines += [f"**Smoke run, not a measurement** ({s['repeats']} repeat(s) of {s['steps']} "
                  f"step(s); a measurement has at least {SMOKE['repeats']} repeats of "
                  f"{SMOKE['steps']} steps).", ""]
    lines += [
        f"Measured {summary['date']} on {cpu['model']} ({cpu['usable_cores']} cores; {bf16}), "
        f"TensorFlow {v['tensorflow']}, Keras {v['keras']}, PyTorch {v['torch']}; batch "
        f"{s['batch_size']}, {s['steps']} timed steps after {s['warmup']} warm-up steps, "
        f"{s['repeats']} interleaved repeats, threads: {threads}. Medians over the repeats "
        "(minimum–maximum); the ratios are taken within each repeat. Data: "
        f"[{json_path.name}]({_link(json_path, md_path)}).", "",
        format_tables(rows), ""]
    counts = []
    for p in PRECISIONS:
        met = sum(bool(r["goal_met"][p]) for r in rows)
        counts.append(f"in {LABELS[p]} for {met} of {len(rows)} models")
    lines += [f"Goal, highway-zoo at least {GOAL:.1f}x PyTorch in each precision: met "
              f"{counts[0]}, {counts[1]}.", ""]
    failed = [f"`{r['model']}` {key}: {errors[0]}" for r in rows
              for key, errors in r["failures"].items()]
    if failed:
        lines += ["Failed runs (first error of each cell): " + "; ".join(failed) + ".", ""]
    lines += [f"![Training images/s per model, float32 and bfloat16, highway-zoo and PyTorch]"
              f"({_link(png_path, md_path)})", ""]
    return "\n".join(lines)


def _once(seen: set[str], label: str) -> str | None:
    """`label` the first time, None after."""
    if label in seen:
        return None
    seen.add(label)
    return label


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Grouped bars per model: images/s of the four cells (log scale, whiskers from the
    minimum to the maximum) above, highway-zoo / PyTorch per precision against the goal
    below. A failed cell has no bar and says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"highway_zoo": "#1f77b4", "pytorch": "#ee4c2c"}
    hatches = {"float32": "", "mixed_bfloat16": "//"}
    series = [(p, i) for p in PRECISIONS for i in IMPLEMENTATIONS]
    width = 0.8 / len(series)
    labelled: set[str] = set()  # each series' legend entry from its first bar drawn
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(7.0, 1.5 * len(rows) + 2), 7.5),
                                      sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for k, (p, i) in enumerate(series):
        offset = (k - (len(series) - 1) / 2) * width
        for m, row in enumerate(rows):
            cell = row["images_per_s"][p][i]
            if cell is None:
                top.text(m + offset, 0.02, "failed", rotation=90, ha="center", va="bottom",
                         fontsize=7, transform=top.get_xaxis_transform())
                continue
            top.bar(m + offset, cell["median"], width, color=colours[i], hatch=hatches[p],
                    edgecolor="white" if not hatches[p] else "black", linewidth=0.5,
                    yerr=[[cell["median"] - cell["min"]], [cell["max"] - cell["median"]]],
                    capsize=2, label=_once(labelled, f"{LABELS[i]}, {LABELS[p]}"))
    top.set_yscale("log")
    top.set_ylabel("training images/s (median, min–max)")
    top.set_title(title, fontsize=10)
    if labelled:  # none where every cell failed
        top.legend(fontsize=8, loc="upper right")
    pair_width = 0.8 / len(PRECISIONS)
    for k, p in enumerate(PRECISIONS):
        offset = (k - (len(PRECISIONS) - 1) / 2) * pair_width
        for m, row in enumerate(rows):
            cell = row["highway_zoo_over_pytorch"][p]
            if cell is None:
                continue
            bottom.bar(m + offset, cell["median"], pair_width, color="#7f7f7f",
                       hatch=hatches[p], edgecolor="black", linewidth=0.5,
                       yerr=[[cell["median"] - cell["min"]], [cell["max"] - cell["median"]]],
                       capsize=2, label=_once(labelled, LABELS[p]))
    bottom.axhline(GOAL, color="black", linestyle="--", linewidth=1,
                   label=f"goal: {GOAL:.1f}x")
    bottom.set_ylabel("highway-zoo / PyTorch")
    bottom.legend(fontsize=8, loc="upper right")
    bottom.set_xticks(range(len(rows)), [r["model"] for r in rows], rotation=20, ha="right",
                      fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


# -- the command ---------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = driver.parser(f"benchmarks.{NAME}", __doc__, RESULTS)
    p.add_argument("--models", default=list(MODELS),
                   type=lambda text: [m for m in text.split(",") if m],
                   help=f"comma-separated (default {','.join(MODELS)})")
    p.add_argument("--batch-size", type=int, default=100, help="the recipes' batch (100)")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads of both frameworks (default: each one's own)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds one run may take before it counts as failed (900)")
    p.add_argument("--page", type=Path, default=None, metavar="DIR",
                   help=f"where {NAME}.md and {NAME}.png go (default: beside the JSON; the "
                   "site's: docs/results/bench)")
    p.add_argument("--redraw", action="store_true",
                   help="measure nothing: write the table and the figure again from the JSON "
                   "at --out")
    return p


def command(args: argparse.Namespace) -> str:
    """The command line that measures this run's settings again."""
    parts = ["python -m benchmarks.conv_precision", "--models", ",".join(args.models),
             "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup",
             str(args.warmup), "--repeats", str(args.repeats)]
    if args.threads:
        parts += ["--threads", str(args.threads)]

    def shown(path: Path) -> str:
        path = Path(path).resolve()
        return str(path.relative_to(driver.ROOT) if path.is_relative_to(driver.ROOT) else path)

    if Path(args.out).resolve() != RESULTS:
        parts += ["--out", shown(args.out)]
    if args.page is not None:
        parts += ["--page", shown(args.page)]
    return " ".join(parts)


def _child(args: argparse.Namespace):
    def run_one(key: tuple[str, str, str]) -> dict:
        name, precision, implementation = key
        try:
            return driver.run_child(f"benchmarks.{NAME}", {
                "name": name, "implementation": implementation, "precision": precision,
                "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
                "threads": args.threads}, timeout=args.timeout)
        except driver.MeasurementFailed as error:  # recorded; the run goes on
            return {"model": name, "implementation": implementation, "precision": precision,
                    "error": str(error)}
    return run_one


def _describe(key, run) -> str:
    name, precision, implementation = key
    what = (f"{run['train_images_per_s']:,.0f} img/s" if _ok(run)
            else f"failed: {run['error'][-160:]}")
    return f"{name} {precision} {implementation}: {what}"


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    page = Path(args.page) if args.page is not None else out.parent
    if args.redraw:
        return draw(out, page)
    from benchmarks.implementations import torch_conv_highway

    params = {}
    for name in args.models:  # one line for a net with no twin, before any process starts
        try:
            params[name] = sum(p.numel() for p in torch_conv_highway.build(name).parameters())
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
    cpu = cpu_info()
    load_before = os.getloadavg()
    if load_before[0] > 0.5 * (os.cpu_count() or 1):
        print(f"warning: the machine is busy (load average {load_before[0]:.1f} on "
              f"{os.cpu_count()} cores): these speeds will not be the idle machine's",
              flush=True)
    if not has_bf16_instructions(cpu):
        print(f"{cpu['model']} has no bfloat16 instructions (avx512_bf16, amx_bf16): "
              "bfloat16 runs emulated, slowly, or fails; both are recorded", flush=True)
    plan = [(name, precision, implementation) for name in args.models
            for precision in PRECISIONS for implementation in IMPLEMENTATIONS]
    runs = driver.interleaved(plan, args.repeats, _child(args), describe=_describe)
    rows = [summarise(name, {(p, i): runs[(name, p, i)] for p in PRECISIONS
                             for i in IMPLEMENTATIONS}, params[name]) for name in args.models]
    summary = {
        "command": command(args), "smoke": (args.repeats < SMOKE["repeats"]
                                            or args.steps < SMOKE["steps"]),
        "cpu": cpu, "versions": versions(),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "settings": {"models": args.models, "precisions": list(PRECISIONS),
                     "implementations": list(IMPLEMENTATIONS), "batch_size": args.batch_size,
                     "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
                     "threads": args.threads, "timeout_s": args.timeout,
                     "optimizer": "SGD(0.01, momentum=0.9, nesterov=True)",
                     "inputs": "random raw pixels, copied from the host every step",
                     "mixed_bfloat16": "Keras: the mixed_bfloat16 dtype policy; PyTorch: "
                                       "torch.autocast(dtype=torch.bfloat16)",
                     "goal": f"highway_zoo / pytorch >= {GOAL} in each precision"},
        "results": rows}
    driver.write_results(out, summary)
    return draw(out, page) | (1 if any(key.startswith("float32/") for r in rows
                                       for key in r["failures"]) else 0)


def draw(out: Path, page: Path) -> int:
    """The table file and the figure from the JSON at `out`, written into `page`."""
    summary = json.loads(Path(out).read_text())
    rows = summary["results"]
    md_path, png_path = page / f"{NAME}.md", page / f"{NAME}.png"
    text = markdown(summary, Path(out), md_path, png_path)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = md_path.with_name(f".{md_path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, md_path)  # never half a table
    plot(rows, png_path, f"{summary['cpu']['model']}, batch {summary['settings']['batch_size']}"
         + (" (smoke run, not a measurement)" if summary["smoke"] else ""))
    print()
    print(format_tables(rows))
    print(f"Wrote {md_path} and {png_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
