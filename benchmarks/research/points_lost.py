"""The Table 3 net here against its released training log, one difference at a time.

    python -m benchmarks.research.points_lost RUN_DIR... --out docs/results/points_lost \
        [--snapshot docs/results/nips_tables/table3_tenth/results.json]

Each RUN_DIR is a `highway-zoo train highway_cifar10 --recipe caffe_cifar --epochs N` run
(finished or under way) that changes one thing against the project's default (its overrides
and run.json say which). The released log (`released_log.json` in `--out`: the authors' net
on the original CIFAR-10, Caffe, the same solver) is the reference: at the constant rate of
the first 200 epochs, its test accuracy after each epoch. One epoch's test accuracy moves by
up to 3 points, so each run is compared by its mean over a window of epochs (default 6-10,
where the project's runs first fell behind), and by its training loss. `--snapshot` adds the
runs of a `nips-table` snapshot (their first epochs, where their schedule is the same).

Writes `table.md` (a row per run: its test accuracy per epoch, the window's mean, the mean's
distance from the log's), `curves.png` and `results.json` to `--out`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

LOG_FILE = "released_log.json"


def read_run(run_dir: Path) -> dict:
    """A run's description (what it changes), precision and per-epoch history."""
    run = json.loads((run_dir / "run.json").read_text())
    history = json.loads((run_dir / "history.json").read_text())
    overrides = dict(run.get("overrides") or {})
    return {"run": run_dir.name, "architecture": run["architecture"],
            "dtype": overrides.pop("dtype", "float32"), "changes": overrides,
            "recipe": run["recipe"]["name"], "seed": run["seed"],
            "commit": (run.get("code") or {}).get("commit"),
            "test_accuracy": [e["val_accuracy"] for e in history],
            "train_loss": [e["loss"] for e in history]}


def read_snapshot(path: Path, epochs: int) -> list[dict]:
    """The first `epochs` epochs of each run of a `nips-table --snapshot` results.json."""
    snapshot = json.loads(path.read_text())
    rows = []
    for run in snapshot["runs"]:
        overrides = dict(run.get("overrides") or {})
        rows.append({"run": f"{run['model']} ({run['recipe']}, {path.parent.name})",
                     "architecture": run["model"], "dtype": overrides.pop("dtype", "float32"),
                     "changes": overrides, "recipe": run["recipe"], "seed": run["seed"],
                     "commit": None, "train_loss": [],
                     "test_accuracy": [a / 100 for a in run["test_accuracy_curve"][:epochs]]})
    return rows


def window_mean(values: list[float], first: int, last: int) -> float | None:
    """The mean of epochs `first`..`last` (1-based, inclusive); None if the run has not
    reached `last`."""
    if len(values) < last:
        return None
    return float(np.mean(values[first - 1:last]))


def compare(runs: list[dict], log: list[float], first: int, last: int) -> list[dict]:
    """Each run's window mean and its distance from the log's, in points."""
    reference = window_mean(log[1:], first, last)  # log[0] is before training
    rows = []
    for run in runs:
        mean = window_mean(run["test_accuracy"], first, last)
        rows.append({**run, "window": [first, last],
                     "window_mean": mean, "log_window_mean": reference,
                     "behind_the_log": None if mean is None else 100 * (reference - mean)})
    return rows


def table(rows: list[dict], log: list[float], epochs: int) -> str:
    head = [f"{e}" for e in range(1, epochs + 1)]
    first, last = rows[0]["window"] if rows else (0, 0)
    lines = ["| run | precision | changes | " + " | ".join(head)
             + f" | mean {first}-{last} | behind the log |",
             "| --- | --- | --- | " + " | ".join("---:" for _ in head) + " | ---: | ---: |",
             "| the released log (Caffe, original CIFAR-10) | float32 | | "
             + " | ".join(f"{100 * a:.1f}" for a in log[1:epochs + 1])
             + f" | {100 * window_mean(log[1:], first, last):.1f} | |"]
    for row in rows:
        cells = [f"{100 * a:.1f}" for a in row["test_accuracy"][:epochs]]
        cells += [""] * (epochs - len(cells))
        changes = ", ".join(f"{k}={v}" for k, v in row["changes"].items()) or "none (default)"
        mean = "" if row["window_mean"] is None else f"{100 * row['window_mean']:.1f}"
        behind = "" if row["behind_the_log"] is None else f"{row['behind_the_log']:.1f}"
        lines.append(f"| {row['run']} | {row['dtype']} | {changes} | " + " | ".join(cells)
                     + f" | {mean} | {behind} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], log: list[float], epochs: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.arange(1, epochs + 1)
    ax.plot(x, 100 * np.asarray(log[1:epochs + 1]), "k-", lw=2.5,
            label="released log (Caffe, original CIFAR-10)")
    for row in rows:
        acc = 100 * np.asarray(row["test_accuracy"][:epochs])
        ax.plot(x[:len(acc)], acc, marker="o", ms=3, label=f"{row['run']} ({row['dtype']})")
    ax.set_xlabel("epoch (the released solver's constant rate 0.025)")
    ax.set_ylabel("test accuracy, %")
    ax.set_title("The Table 3 net against its released log (here: CIFAR-10 JPEG copy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--window", default="6,10", help="first,last epoch of the mean")
    parser.add_argument("--snapshot", type=Path, action="append", default=[],
                        help="a nips-table snapshot's results.json whose runs to add")
    args = parser.parse_args(argv)
    first, last = (int(v) for v in args.window.split(","))
    log = json.loads((args.out / LOG_FILE).read_text())["test_accuracy"]
    runs = [read_run(path) for path in args.runs]
    epochs = max(len(r["test_accuracy"]) for r in runs)
    runs += [row for path in args.snapshot for row in read_snapshot(path, epochs)]
    rows = compare(runs, log, first, last)
    (args.out / "table.md").write_text(table(rows, log, epochs))
    plot(rows, log, epochs, args.out / "curves.png")
    (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(table(rows, log, epochs))


if __name__ == "__main__":
    main()
