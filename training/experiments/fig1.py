"""NIPS 2015 Fig. 1 by the paper's protocol: a random search per network, then both panels.

The paper (Srivastava et al. 2015, §3.1) picked every network of Fig. 1 by a random search of
100 runs (SGD with momentum; initial learning rate, momentum, exponential learning-rate decay
per epoch, ReLU or tanh, and for highway nets the transform-gate bias b_T in [-10, -1]), then
plotted the best run's training curve per depth (left) and the mean of the top 10 runs' final
training losses (right). `fig1()` (`highway-zoo fig1`) runs that search with KerasTuner
(`training.tuning.tuner`, the paper's space, objective "loss") for every (plain | highway) x
depth cell on the registered `plain_fc{depth}_mnist` / `highway_fc{depth}_mnist` nets (71 /
50 units; other depths by the `depth` override) and draws both panels from the trials.

What "training loss" means here: Keras's epoch loss, the mean cross-entropy over that epoch's
training batches (recorded per trial in `search/trial_<id>/history.json`); the final loss is
the last epoch's. Runs are ranked by that final loss; a run that stopped on a NaN/Inf loss
(TerminateOnNaN) counts as diverged and ranks last. (KerasTuner's own score, used for the
cell's best_model, is the best epoch's loss; for a training loss the two rarely differ.)

Writes, under `out` (default runs/fig1), as a `Study` (`Fig1Study`)::

    <kind>_fc<depth>/   one `highway-zoo tune` search directory per cell (resumable)
    results.json        settings, data, and per cell: trials run, diverged, best run (its loss
                        per epoch and hyperparameters), mean ± std of the top 10 final losses,
                        seconds of training; "complete" once every cell has all its trials
    table.md            the table
    fig1.png            left: best run's loss per epoch per depth (plain dashed, highway
                        solid); right: mean ± std of the top-10 final losses against depth
    search.png          every run's final loss against its step size, a panel per depth,
                        highway runs coloured by their b_T: what sets the ranking

Resuming: run the same command again; finished trials are kept, interrupted ones rerun, and
`--trials` may be raised. Distributed: the same command in every process with KerasTuner's
variables (KERASTUNER_TUNER_ID=chief|worker<N>, KERASTUNER_ORACLE_IP, KERASTUNER_ORACLE_PORT);
cells run one after another, cell i on port PORT + i (each cell has its own oracle), so the
chief needs ports PORT .. PORT + cells - 1 and every process the same --depths and --kinds.
Workers train; the chief hands out trials and writes the results.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.data import load_dataset
from training.experiments.fc import architecture
from training.experiments.study import Study, code_version, format_table, run_study
from training.run_dir import RUNS_ROOT

KINDS = ("plain", "highway")
DEPTHS = (10, 20, 50, 100)
SEARCH_FIGURE = "search.png"
# A run "at chance" ends within 5% of ln 10, the loss of a uniform guess over MNIST's 10
# classes: it has not learned. (On the full MNIST the finished runs leave a gap from 1.9 to 2.2.)
CHANCE_LOSS = 0.95 * math.log(10)
LOSS_NOTE = ("training loss = Keras's epoch loss (mean cross-entropy over the epoch's "
             "training batches)")
CHANCE_NOTE = "at chance = runs whose final loss is within 5% of ln 10 (a uniform guess)"


def cell_dir_name(kind: str, depth: int) -> str:
    return f"{kind}_fc{depth}"


def _check(depths, kinds, trials, epochs, top) -> None:
    if not depths or any(not isinstance(d, int) or d < 2 for d in depths):
        raise ValueError(f"depths must be integers >= 2. Received: {list(depths)!r}")
    if len(set(depths)) != len(depths):
        raise ValueError(f"depths must be distinct. Received: {list(depths)!r}")
    bad = [k for k in kinds if k not in KINDS]
    if not kinds or bad or len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds must be distinct names from {', '.join(KINDS)}. "
                         f"Received: {list(kinds)!r}")
    for label, value in (("trials", trials), ("epochs", epochs), ("top", top)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{label} must be a positive integer. Received: {value!r}")


def _finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def summarize_cell(cell_dir: Path, kind: str, depth: int, epochs: int, top: int) -> dict:
    """The cell's finished trials, ranked by final training loss (diverged runs last)."""
    from training.tuning.tuner import PROJECT_NAME, TRIAL_HISTORY_FILE

    runs, unfinished = [], 0
    for trial_dir in sorted((cell_dir / PROJECT_NAME).glob("trial_*")):
        trial_file, history_file = trial_dir / "trial.json", trial_dir / TRIAL_HISTORY_FILE
        if not trial_file.exists():
            continue
        record = json.loads(trial_file.read_text(encoding="utf-8"))
        if record.get("status") != "COMPLETED" or not history_file.exists():
            unfinished += 1  # failed, or running when the process stopped
            continue
        history = json.loads(history_file.read_text(encoding="utf-8"))
        losses = history["history"]["loss"]
        # TerminateOnNaN stops a diverging run early: fewer epochs, a non-finite last loss.
        diverged = len(losses) < epochs or not _finite(losses)
        accuracy = history["history"].get("val_accuracy") or [None]
        runs.append({
            "trial_id": record["trial_id"],
            "hyperparameters": {k: v for k, v in record["hyperparameters"]["values"].items()
                                if not k.startswith("tuner/")},
            "loss_per_epoch": [v if math.isfinite(v) else None for v in losses],
            "final_loss": None if diverged else losses[-1],
            "test_accuracy": accuracy[-1],
            "seconds": history["seconds"],
        })
    runs.sort(key=lambda r: (r["final_loss"] is None, r["final_loss"] or 0.0, r["trial_id"]))
    finals = [r["final_loss"] for r in runs if r["final_loss"] is not None][:top]
    best = runs[0] if runs and runs[0]["final_loss"] is not None else None
    name, overrides = architecture(kind, depth)
    return {
        "kind": kind, "depth": depth, "architecture": name, "overrides": overrides,
        "trials": len(runs), "diverged": sum(r["final_loss"] is None for r in runs),
        "at_chance": sum(r["final_loss"] is not None and r["final_loss"] >= CHANCE_LOSS
                         for r in runs),
        "unfinished": unfinished,
        "best": best,
        "top": {"n": len(finals), "mean": float(sum(finals) / len(finals)) if finals else None,
                "std": _std(finals), "final_losses": finals},
        "seconds": round(sum(r["seconds"] for r in runs), 1),
        "runs": runs,
    }


def _std(values: Sequence[float]) -> float | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    return float(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _row(c: dict[str, Any]) -> list[Any]:
    best, t = c["best"], c["top"]
    hps = acc = final = "-"
    if best:
        hp = best["hyperparameters"]
        bias = f"b_T {hp['transform_bias']:.2f}, " if "transform_bias" in hp else ""
        hps = (f"{bias}lr {hp['learning_rate']:.2e}, momentum {hp['momentum']:.3f}, "
               f"decay {hp['lr_decay']:.3f}, {hp['activation']}")
        acc = "-" if best["test_accuracy"] is None else f"{best['test_accuracy']:.3f}"
        final = f"{best['final_loss']:.2e}"
    mean = "-" if t["mean"] is None else f"{t['mean']:.2e} ± {t['std']:.1e} ({t['n']})"
    return [c["depth"], c["kind"], c["trials"], final, mean, c["diverged"], c["at_chance"],
            hps, acc, _minutes(c["seconds"])]


def fig1_table(results: dict[str, Any]) -> str:
    top = results["settings"]["top"]
    return format_table(
        ["depth", "net", "trials", "best final loss", f"mean top {top} ± std (n)", "diverged",
         "at chance", "best run's hyperparameters", "test acc (best)", "training time"],
        [_row(c) for c in results["cells"]],
        ["---:", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:", "---:"])


def table_text(results: dict[str, Any], footer: str) -> str:
    """table.md: the data and what the columns mean, the table, then `footer`."""
    return (f"Data: {_data_line(results)}; {LOSS_NOTE}; {CHANCE_NOTE}.\n\n"
            f"{fig1_table(results)}\n\n{footer}")


def _data_line(results: dict[str, Any]) -> str:
    s, d = results["settings"], results["data"]
    return (f"{d['name']} ({d['source']}): {d['num_train']} training / {d['num_test']} test "
            f"images; {s['epochs']} epochs per run, batch {s['batch_size']}, "
            f"{s['trials']} runs per net")


def plot(results: dict[str, Any], path: Path) -> None:
    """Fig. 1's two panels (log-scale loss)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from zoo.files import save_figure

    cells = results["cells"]
    depths = sorted({c["depth"] for c in cells})
    colours = {d: plt.cm.viridis(i / max(1, len(depths) - 1) * 0.85)
               for i, d in enumerate(depths)}
    style = {"plain": "--", "highway": "-"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for c in cells:
        if not c["best"]:
            continue
        losses = c["best"]["loss_per_epoch"]
        left.plot(range(1, len(losses) + 1), losses, style[c["kind"]], marker=".",
                  color=colours[c["depth"]], label=f"{c['kind']} {c['depth']}")
    left.set(xlabel="epoch", ylabel="training loss (mean cross-entropy)", yscale="log",
             title="best run per network")
    left.legend(fontsize=8, ncol=2)
    for kind in KINDS:
        rows = sorted((c for c in cells if c["kind"] == kind and c["top"]["mean"] is not None),
                      key=lambda c: c["depth"])
        if not rows:
            continue
        means = [c["top"]["mean"] for c in rows]
        # Log axis: a lower error bar below zero would vanish; stop it just above zero.
        low = [min(c["top"]["std"], 0.99 * m) for c, m in zip(rows, means)]
        right.errorbar([c["depth"] for c in rows], means,
                       yerr=[low, [c["top"]["std"] for c in rows]], fmt="o" + style[kind],
                       capsize=3, color="black" if kind == "highway" else "grey",
                       label=f"{kind} (mean ± std of top {results['settings']['top']})")
    right.set(xlabel="depth (layers)", ylabel="final training loss", yscale="log",
              xscale="log", xticks=depths, title="top runs per network")
    right.set_xticklabels([str(d) for d in depths])
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
    s, d = results["settings"], results["data"]
    fig.suptitle(f"NIPS 2015 Fig. 1 by random search: {s['trials']} runs per net, "
                 f"{s['epochs']} epochs each, batch {s['batch_size']}\n{d['name']}: "
                 f"{d['source']}; {d['num_train']} training images", fontsize=9)
    fig.text(0.5, 0.005, LOSS_NOTE, ha="center", fontsize=7, color="dimgrey")
    fig.tight_layout(rect=(0, 0.03, 1, 0.93))
    save_figure(fig, path)


def step_size(hyperparameters: dict[str, Any]) -> float:
    """The learning rate over (1 - momentum): SGD with momentum's steady step per unit of
    gradient, the one number that ranks a search's runs best."""
    return hyperparameters["learning_rate"] / (1.0 - hyperparameters["momentum"])


def search_points(results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per depth, the finished runs as `search.png` draws them: for each kind a list of
    (step size, final loss, b_T or None), and how many runs diverged (not drawn)."""
    points: dict[int, dict[str, Any]] = {}
    for c in results["cells"]:
        depth = points.setdefault(c["depth"], {"diverged": 0})
        depth[c["kind"]] = [(step_size(r["hyperparameters"]), r["final_loss"],
                             r["hyperparameters"].get("transform_bias"))
                            for r in c["runs"] if r["final_loss"] is not None]
        depth["diverged"] += c["diverged"]
    return dict(sorted(points.items()))


def plot_search(results: dict[str, Any], path: Path) -> None:
    """Every run's final loss against its step size, a panel per depth: plain runs grey,
    highway runs coloured by b_T (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.files import save_figure

    points = search_points(results)
    low, high = results["settings"]["space"]["transform_bias"]
    columns = max(1, len(points))
    fig, axes = plt.subplots(1, columns, figsize=(3.4 * columns + 1, 3.8), sharey=True,
                             squeeze=False, layout="constrained")
    shown = None
    for ax, (depth, cell) in zip(axes[0], points.items()):
        if cell.get("plain"):
            x, y, _ = zip(*cell["plain"])
            ax.scatter(x, y, marker="x", color="grey", label="plain")
        if cell.get("highway"):
            x, y, b = zip(*cell["highway"])
            shown = ax.scatter(x, y, c=b, cmap="viridis", vmin=low, vmax=high,
                               edgecolors="black", linewidths=0.3, label="highway")
        diverged = f", {cell['diverged']} diverged (not shown)" if cell["diverged"] else ""
        ax.set(xscale="log", yscale="log", title=f"depth {depth}{diverged}",
               xlabel="learning rate / (1 − momentum)")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("final training loss")
    axes[0][0].legend(fontsize=8)
    if shown is not None:
        fig.colorbar(shown, ax=axes[0].tolist(), label="highway: initial b_T", pad=0.01)
    s, d = results["settings"], results["data"]
    fig.suptitle(f"Every run of the Fig. 1 search: {s['epochs']} epochs each, batch "
                 f"{s['batch_size']}; {d['name']}: {d['source']}; {d['num_train']} training "
                 f"images", fontsize=9)
    save_figure(fig, path)


class Fig1Study(Study):
    """Fig. 1 as a `training.experiments.study.Study`: a job per (kind, depth) cell, each a
    random search (`training.tuning.tuner.search`) in its run directory.

    Its settings leave out `trials` (raised on a rerun, each cell's search runs the new trials)
    and `top` (it only summarises). Its jobs are not claimed one per process as other studies'
    are: in a distributed search every process works on every cell, one cell after another
    (`run_all`, `training.tuning.tuner.search_cells`)."""

    name, figure_file, indent = "fig1", "fig1.png", 2
    figure_files = (figure_file, SEARCH_FIGURE)

    def __init__(self, depths, kinds, trials, *, epochs, top, data_dir, batch_size,
                 max_train_examples, max_test_examples, seed):
        self.depths, self.kinds = sorted(depths), list(kinds)
        _check(self.depths, self.kinds, trials, epochs, top)
        self.trials, self.epochs, self.top, self.seed = trials, epochs, top, seed
        self.search_settings = {
            "epochs": epochs, "batch_size": batch_size, "max_train_examples": max_train_examples,
            "max_test_examples": max_test_examples, "seed": seed}
        self.data_dir = None if data_dir is None else str(data_dir)
        # Found (or refused) before the directory is claimed: a refusal leaves nothing behind.
        # Each cell's search loads it again, as its own process in a distributed search must.
        load_dataset("mnist", data_dir)
        self.started = time.monotonic()
        self.data: dict[str, Any] = {}  # the cells' data, as their searches record it

    def settings(self) -> dict[str, Any]:
        # The code too: a study resumes only on the code it started with.
        return {"depths": self.depths, "kinds": self.kinds, **self.search_settings,
                "code": code_version()}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        jobs = []
        for depth in self.depths:
            for kind in self.kinds:
                name, overrides = architecture(kind, depth)
                jobs.append({"kind": kind, "depth": depth, "architecture": name,
                             "overrides": overrides, "trials": self.trials, "top": self.top,
                             "search": self.search_settings, "data_dir": self.data_dir,
                             "run_dir": str(out / cell_dir_name(kind, depth))})
        return jobs

    def label(self, job: dict[str, Any]) -> str:
        return f"{job['kind']} depth {job['depth']}"

    @staticmethod
    def run_one(job: dict[str, Any], data: Any = None) -> dict[str, Any]:
        """One cell's search, standalone; its summary (`summarize_cell`)."""
        from training.tuning import tuner as tuning

        tuning.search_cells([_cell(job)], **_search_arguments(job))
        return _summary(job)

    def run_all(self, jobs: Sequence[dict[str, Any]], isolate: bool):
        from training.tuning import tuner as tuning

        def announce(i: int, cell: tuning.Cell) -> None:
            job = jobs[i]
            override = f", depth={job['depth']}" if cell.overrides else ""
            print(f"\n=== Fig. 1 cell {i + 1}/{len(jobs)}: {self.label(job)} ({cell.name}"
                  f"{override}), {self.trials} "
                  f"trials of {self.epochs} epoch(s); "
                  f"{_minutes(time.monotonic() - self.started)} so far ===", flush=True)

        searched = tuning.search_cells([_cell(job) for job in jobs], announce,
                                       **_search_arguments(jobs[0]))
        if searched is None:
            print("Worker: every cell is done; the chief writes the figure.", flush=True)
            return None
        runs = [_summary(job) for job in jobs]
        first = json.loads((Path(jobs[0]["run_dir"]) / tuning.SETTINGS_FILE)
                           .read_text(encoding="utf-8"))
        self.data = {"data": first["dataset"], "batch_size": first["batch_size"],
                     "space": first["space"]}
        return runs

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        return f"{result['trials']} trials, {result['diverged']} diverged"

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(runs)

    def results(self, runs, summary) -> dict[str, Any]:
        return {
            "settings": {"depths": self.depths, "kinds": self.kinds, "trials": self.trials,
                         "epochs": self.epochs, "top": self.top,
                         "batch_size": self.data["batch_size"], "seed": self.seed,
                         "tuner": "random", "objective": "final training loss",
                         "optimizer": "SGD with momentum, ExponentialDecay per epoch "
                                      "(staircase)",
                         "space": self.data["space"], "loss": LOSS_NOTE,
                         "code": code_version()},
            "data": self.data["data"],
            "complete": all(c["trials"] == self.trials for c in summary),
            "cells": list(summary),
        }

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        results = self.results(summary, summary)
        done = sum(c["trials"] for c in summary)
        end = "." if results["complete"] else " (incomplete: run the same command again)."
        return table_text(results, f"{done} of {self.trials * len(summary)} runs finished{end}")

    def figure(self, results: dict[str, Any], out: Path) -> None:
        plot(results, out / self.figure_file)
        plot_search(results, out / SEARCH_FIGURE)


def _cell(job: dict[str, Any]):
    from training.tuning import tuner as tuning

    return tuning.Cell(job["architecture"], Path(job["run_dir"]), job["overrides"])


def _search_arguments(job: dict[str, Any]) -> dict[str, Any]:
    """`search`'s keyword arguments for a cell of `job`'s study: the paper's space, a random
    search of the final training loss."""
    from training.tuning import tuner as tuning

    return {"space": tuning.SearchSpace(), "tuner": "random", "max_trials": job["trials"],
            "objective": "loss", "data_dir": job["data_dir"], **job["search"]}


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    return summarize_cell(Path(job["run_dir"]), job["kind"], job["depth"],
                          job["search"]["epochs"], job["top"])


def snapshot(study_dir: str | os.PathLike, dest: str | os.PathLike, trials: int,
             top: int = 10) -> dict[str, Any]:
    """Writes `dest`/results.json, table.md, fig1.png and search.png for the Fig. 1 study in
    `study_dir` as it stands: the finished trials of each cell searched so far, a search under
    way included, against `trials` planned per cell; trains nothing. Returns the results."""
    from training.experiments.study import study_settings
    from training.tuning.tuner import SETTINGS_FILE
    from zoo.files import write_text

    study_dir, dest = Path(study_dir), Path(dest)
    settings = study_settings(study_dir, "fig1")
    if "depths" not in settings or "kinds" not in settings:
        raise ValueError(f"{study_dir} is not a `highway-zoo fig1` study.")
    cells, search = [], None
    for depth in settings["depths"]:
        for kind in settings["kinds"]:
            cell_dir = study_dir / cell_dir_name(kind, depth)
            if (cell_dir / SETTINGS_FILE).is_file():
                search = search or json.loads((cell_dir / SETTINGS_FILE).read_text("utf-8"))
                cells.append(summarize_cell(cell_dir, kind, depth, settings["epochs"], top))
    if search is None:
        raise ValueError(f"No cell of the study in {study_dir} has started its search yet.")
    results = {
        "settings": {"depths": settings["depths"], "kinds": settings["kinds"], "trials": trials,
                     "epochs": settings["epochs"], "top": top,
                     "batch_size": search["batch_size"], "seed": settings["seed"],
                     "tuner": "random", "objective": "final training loss",
                     "optimizer": "SGD with momentum, ExponentialDecay per epoch (staircase)",
                     "space": search["space"], "loss": LOSS_NOTE,
                     "code": settings.get("code")},
        "data": search["dataset"],
        "complete": len(cells) == len(settings["depths"]) * len(settings["kinds"])
                    and all(c["trials"] == trials for c in cells),
        "cells": cells,
    }
    done = sum(c["trials"] for c in cells)
    planned = trials * len(settings["depths"]) * len(settings["kinds"])
    commit = (settings.get("code") or {}).get("commit", "?")[:7]
    dest.mkdir(parents=True, exist_ok=True)
    write_text(dest / "results.json", json.dumps(results, indent=2) + "\n", overwrite=True)
    write_text(dest / "table.md",
               table_text(results, f"{done} of {planned} runs finished (code {commit}).\n"),
               overwrite=True)
    plot(results, dest / Fig1Study.figure_file)
    plot_search(results, dest / SEARCH_FIGURE)
    return results


def fig1(
    depths: Sequence[int] = DEPTHS,
    kinds: Sequence[str] = KINDS,
    trials: int = 100,
    *,
    epochs: int = 12,
    top: int = 10,
    out: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    batch_size: int | None = None,
    max_train_examples: int | None = None,
    max_test_examples: int | None = None,
    seed: int = 0,
) -> dict[str, Any] | None:
    """Runs (or resumes) the search of every cell and writes results.json, table.md and
    fig1.png and search.png under `out` (default runs/fig1).

    Returns the results (None in a worker process of a distributed search).

    Raises:
        ValueError: bad depths, kinds or counts.
        FileExistsError: `out` or a cell's directory holds a search with other settings.
    """
    study = Fig1Study(depths, kinds, trials, epochs=epochs, top=top, data_dir=data_dir,
                      batch_size=batch_size, max_train_examples=max_train_examples,
                      max_test_examples=max_test_examples, seed=seed)
    # One fixed default, so that the same command resumes and every process of a distributed
    # search shares it.
    return run_study(study, out or RUNS_ROOT / "fig1", isolate=False)
