"""NIPS 2015 Tables 1-3 point by point: the zoo's conv nets trained with the released solvers on
the paper's data, several seeds each, reported as the paper reports them, best (mean ± std).

    highway-zoo nips-table 1 --data-dir MNIST     # highway_conv16_mnist x 3 seeds, conv32 x 2
    highway-zoo nips-table 2 --data-dir CIFAR10 --models highway_a_cifar10
    highway-zoo nips-table 2 --data-dir CIFAR10 --models highway_a_cifar10 --dropout 0

`--dropout` replaces the nets' dropout rates (Highway A's are the reconstruction's guess) and
`--dtype` the float32 arithmetic (`mixed_bfloat16`); the table then names them beside the net,
and the study is another study (its own `--out`).

`--data-dir` is what `highway-zoo prepare-images` wrote (or the official files). The test
accuracy reported is the final epoch's, on the full test split; the best epoch's is recorded
too (it picks on the test set, as Caffe's logs do, so it is optimistic). Writes, under `out`::

    study.json              the settings (a rerun resumes only these, on the same code)
    <model>_seed<s>/        a run directory per net (`highway-zoo train`'s), result.json when done
    results.json            settings, data, every run, per model best and mean ± std
    table.md                per model: parameters, seeds, epochs, best (mean ± std), the paper's
    accuracy.png            test error per epoch, a line per run, the paper's best dashed

`run_record(run_dir)` reads a run finished or not, and `snapshot(study_dir, dest)` (`--snapshot`)
writes the table and figure of a study under way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import zoo
from training.experiments.study import (
    STD_NOTE,
    Study,
    code_version,
    format_table,
    run_study,
)
from training.recipes import get_recipe, recipe_name
from zoo.files import save_figure

# Per table: its dataset and its nets with the seeds each gets by default (the minimum:
# three of width 16, two of width 32; the CIFAR nets one each on a CPU).
TABLES: dict[int, dict[str, Any]] = {
    1: {"dataset": "mnist", "seeds": {"highway_conv16_mnist": 3, "highway_conv32_mnist": 2}},
    2: {"dataset": "cifar10", "seeds": {"highway_a_cifar10": 1, "highway_b_cifar10": 1,
                                        "highway_c_cifar10": 1}},
    3: {"dataset": "cifar10", "seeds": {"highway_cifar10": 1}},
}
# The paper's test accuracy (%): best of 5 runs, and their mean and std where it gives them.
PAPER = {
    "highway_conv16_mnist": (99.43, 99.40, 0.03),
    "highway_conv32_mnist": (99.55, 99.54, 0.02),
    "highway_a_cifar10": (89.18, None, None),
    "highway_b_cifar10": (92.46, 92.28, 0.16),
    "highway_c_cifar10": (91.20, None, None),
    "highway_cifar10": (92.40, 92.31, 0.12),
}
_COLORS = {name: f"C{i}" for i, name in enumerate(PAPER)}


def run_record(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What a table needs of one `highway-zoo train` run directory, finished or not: its net,
    its architecture overrides, seed, epochs done of those planned, the final and best epoch's
    test accuracy (%), the test accuracy per epoch and the training speed."""
    from training.run_dir import FINISHED, RunDir

    run_dir = RunDir(run_dir)
    run, history = run_dir.read_run(), run_dir.read_history()
    curve = [100 * e["val_accuracy"] for e in history]
    finished = run_dir.status == FINISHED
    seconds = run_dir.read_metrics()["train_seconds"] / len(history) if finished else None
    return {
        "model": run["architecture"], "overrides": run["overrides"], "seed": run["seed"],
        "finished": finished,
        "epochs": len(history), "epochs_planned": run["recipe"]["epochs"],
        "recipe": run["recipe"]["name"], "dataset": run["dataset"],
        "test_accuracy": curve[-1] if curve else None,
        "best_test_accuracy": max(curve) if curve else None,
        "best_epoch": int(np.argmax(curve)) + 1 if curve else None,
        "test_accuracy_curve": curve,
        "seconds_per_epoch": seconds,
    }


def summary(runs: Sequence[dict[str, Any]], models: Sequence[str]) -> list[dict[str, Any]]:
    """Per model (in `models`' order, those with runs): its runs' final test accuracy as the
    paper reports it, best and mean ± std over seeds, and the paper's. Once a seed has
    finished, only finished seeds count (a run under way is not mixed into their spread; its
    epoch is listed in `under_way`); before, the runs under way at the epoch each reached."""
    rows = []
    for model in models:
        mine = sorted((r for r in runs if r["model"] == model and r["epochs"]),
                      key=lambda r: r["seed"])
        if not mine:
            continue
        finished = [r for r in mine if r["finished"]]
        counted = finished or mine
        final = np.array([r["test_accuracy"] for r in counted])
        best, mean, std = PAPER.get(model, (None, None, None))
        rows.append({
            "model": model, "params": zoo.describe(model)["params"],
            "overrides": mine[0]["overrides"], "recipe": mine[0].get("recipe"),
            "seeds": [r["seed"] for r in counted], "epochs": [r["epochs"] for r in counted],
            "epochs_planned": mine[0]["epochs_planned"],
            "finished": bool(finished),
            "under_way": [r["epochs"] for r in mine if finished and not r["finished"]],
            "best": float(final.max()), "mean": float(final.mean()), "std": float(final.std()),
            "paper_best": best, "paper_mean": mean, "paper_std": std,
        })
    return rows


def _ours(row: dict[str, Any]) -> str:
    if len(row["seeds"]) == 1:  # one seed has no spread to show
        return f"{row['best']:.2f}"
    return f"{row['best']:.2f} ({row['mean']:.2f} ± {row['std']:.2f})"


def _paper(row: dict[str, Any]) -> str:
    if row["paper_best"] is None:
        return "-"
    spread = (f" ({row['paper_mean']:.2f} ± {row['paper_std']:.2f})"
              if row["paper_mean"] is not None else "")
    return f"{row['paper_best']:.2f}{spread}"


def _net(row: dict[str, Any]) -> str:
    """The net's name, and the overrides and recipe it trained with where they are not the
    paper's net as registered and its released solver."""
    changed = ", ".join(f"{k} {v}" for k, v in sorted(row["overrides"].items()))
    if row.get("recipe") not in (None, zoo.describe(row["model"])["recipe"]):
        changed = ", ".join(filter(None, (changed, f"recipe {row['recipe']}")))
    return f"`{row['model']}`" + (f" ({changed})" if changed else "")


def paper_table(rows: Sequence[dict[str, Any]], data_note: str) -> str:
    """The table in the paper's form, with how far each net trained."""
    def epochs(row):
        if not row["finished"]:
            return f"{'/'.join(map(str, sorted(set(row['epochs']))))} of {row['epochs_planned']}"
        more = row["under_way"]
        return str(row["epochs_planned"]) + (
            f" ({len(more)} more at epoch {'/'.join(map(str, more))})" if more else "")

    return format_table(
        ["net", "parameters", "seeds", "epochs", f"test accuracy %, {data_note}",
         "paper (best of 5, mean ± std)"],
        [[_net(r), f"{r['params']:,}", len(r["seeds"]), epochs(r), _ours(r), _paper(r)]
         for r in rows],
        ["---", "---:", "---:", "---:", "---:", "---:"]) + "\n"


def plot(rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]], path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for run in sorted(runs, key=lambda r: (r["model"], r["seed"])):
        curve = 100 - np.asarray(run["test_accuracy_curve"])
        ax.plot(np.arange(1, len(curve) + 1), curve, color=_COLORS.get(run["model"], "k"),
                lw=1, alpha=0.8, label=f"{run['model']} seed {run['seed']}")
    for row in rows:
        if row["paper_best"] is not None:
            ax.axhline(100 - row["paper_best"], color=_COLORS.get(row["model"], "k"), ls="--",
                       lw=1, label=f"{row['model']}: the paper's best")
    ax.set(xlabel="epoch", ylabel="test error % (log)", yscale="log", title=title)
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


class NipsTableStudy(Study):
    """One of the paper's Tables 1-3 as a `training.experiments.study.Study`."""

    name, figure_file = "nips-table", "accuracy.png"

    def __init__(self, number: int, *, data_dir, models=None, seeds=None, epochs=None,
                 recipe=None, dropout=None, dtype=None, checkpoint_every=None):
        from training.data import load_dataset
        from training.run_core import check_checkpoint_every

        if number not in TABLES:
            raise ValueError(f"NIPS 2015 has Tables {', '.join(map(str, TABLES))} of these "
                             f"nets, not {number!r}.")
        spec = TABLES[number]
        models = list(models or spec["seeds"])
        if unknown := [m for m in models if m not in spec["seeds"]]:
            raise ValueError(f"Table {number} has {', '.join(spec['seeds'])}, not "
                             f"{', '.join(unknown)}.")
        if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
            raise ValueError(f"seeds must be a positive count. Received: {seeds!r}")
        self.number, self.models = number, models
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.overrides = {k: v for k, v in (("dropout", dropout), ("dtype", dtype))
                          if v is not None}
        if self.overrides:  # what the builder refuses is refused now, before any folder
            for model in models:
                zoo.load(model, weights=None, **self.overrides)
        self.seeds = {m: seeds or spec["seeds"][m] for m in models}
        self.data_dir = str(Path(data_dir).resolve()) if data_dir else None
        # The data checked (and described) before any folder is claimed.
        data = load_dataset(spec["dataset"], data_dir, fallback=False)
        self.data_record = {"name": data.name, "source": data.source,
                            "num_train": data.num_train, "num_test": data.num_test}
        self.recipes = {m: get_recipe(recipe_name(zoo.describe(m)["recipe"], recipe),
                                      epochs=epochs) for m in models}

    def settings(self) -> dict[str, Any]:
        # Overrides only when given: a study of the registered nets keeps its settings.
        return {"table": self.number, "seeds": self.seeds, "data": self.data_record,
                "recipes": self.recipes, **({"overrides": self.overrides} if self.overrides
                                            else {}), "code": code_version()}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        print(f"Data: {self.data_record['source']}", flush=True)
        return [{"model": m, "seed": s, "data_dir": self.data_dir, "overrides": self.overrides,
                 "recipe": self.recipes[m]["name"], "epochs": self.recipes[m]["epochs"],
                 "checkpoint_every": self.checkpoint_every,
                 "run_dir": str(out / f"{m}_seed{s}")}
                for s in range(max(self.seeds.values())) for m in self.models
                if s < self.seeds[m]]

    def label(self, job: dict[str, Any]) -> str:
        return f"{job['model']} seed {job['seed']}"

    @staticmethod
    def run_one(job: dict[str, Any], data: Any = None) -> dict[str, Any]:
        from training import train
        from training.run_dir import FINISHED, RunDir

        if RunDir(job["run_dir"]).status != FINISHED:
            train(job["model"], seed=job["seed"], data_dir=job["data_dir"], out=job["run_dir"],
                  recipe=job["recipe"], epochs=job["epochs"], verbose=2,
                  checkpoint_every=job.get("checkpoint_every"), **job["overrides"])
        return run_record(job["run_dir"])

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        return (f"test accuracy {result['test_accuracy']:.2f}% (best epoch "
                f"{result['best_test_accuracy']:.2f}%)")

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return summary(runs, self.models)

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return paper_table(summary, data_note(self.data_record))

    def results(self, runs, summary) -> dict[str, Any]:
        return {"settings": self.settings(), "std": STD_NOTE, "paper": PAPER,
                "summary": summary, "runs": runs}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        plot(results["summary"], results["runs"], out / self.figure_file,
             f"NIPS 2015 Table {self.number} on {data_note(self.data_record)}")


def snapshot(study_dir: str | os.PathLike, dest: str | os.PathLike,
             table: int | None = None) -> list[dict[str, Any]]:
    """Writes `dest`/results.json, table.md and accuracy.png for the study in `study_dir` as it
    stands, its runs finished or under way (`run_record`); trains nothing. Returns the rows."""
    import json

    from training.experiments.study import study_settings
    from zoo.files import write_text

    study_dir, dest = Path(study_dir), Path(dest)
    settings = study_settings(study_dir, "nips-table")
    if table is not None and settings.get("table") != table:
        raise ValueError(f"{study_dir} is a study of Table {settings.get('table')}, not "
                         f"{table}.")
    models = list(settings["seeds"])
    runs = [run_record(path.parent) for path in sorted(study_dir.glob("*_seed*/history.json"))]
    rows = summary(runs, models)
    planned = sum(settings["seeds"].values())
    done = sum(r["finished"] for r in runs)
    note = data_note(settings["data"])
    dest.mkdir(parents=True, exist_ok=True)
    write_text(dest / "results.json", json.dumps(
        {"settings": settings, "std": STD_NOTE, "paper": PAPER, "summary": rows, "runs": runs},
        indent=1) + "\n", overwrite=True)
    write_text(dest / "table.md", paper_table(rows, note) + f"\n{done} of {planned} runs "
               f"finished, {len(runs)} started (code {settings['code'].get('commit', '?')[:7]}).\n",
               overwrite=True)
    plot(rows, runs, dest / "accuracy.png", f"NIPS 2015 Table {settings['table']} on {note} "
         f"({done} of {planned} runs finished)")
    return rows


def data_note(data: dict[str, Any]) -> str:
    """How a table names its data: CIFAR-10 from JPEGs is not the paper's."""
    lossy = "lossy (JPEG)" in data["source"]
    name = {"mnist": "MNIST", "cifar10": "CIFAR-10"}.get(data["name"], data["name"])
    return f"{name} (JPEG copy)" if lossy else name


def nips_table(number: int, *, data_dir: str | os.PathLike | None,
               models: Sequence[str] | None = None, seeds: int | None = None,
               epochs: int | None = None, recipe: str | None = None,
               dropout: float | Sequence[float] | None = None, dtype: str | None = None,
               checkpoint_every: int | None = None, out: str | os.PathLike | None = None,
               isolate: bool = True) -> dict[str, Any]:
    """Trains Table `number`'s nets (or `models` of them), each over its seeds, on the data at
    `data_dir` (with `dropout` in place of their rates and `dtype`'s Keras dtype policy if
    given); writes runs, JSON, table and figure. Run again with the same settings, it
    resumes; started twice at once, the two processes share the runs. `checkpoint_every`:
    each run also checkpoints every N steps (no setting: a resumed run repeats the
    uninterrupted one however often it checkpointed)."""
    study = NipsTableStudy(number, data_dir=data_dir, models=models, seeds=seeds,
                           epochs=epochs, recipe=recipe, dropout=dropout, dtype=dtype,
                           checkpoint_every=checkpoint_every)
    return run_study(study, out, isolate)
