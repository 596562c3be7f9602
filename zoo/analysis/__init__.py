"""Analyses of trained highway nets: what the gates do, which layers matter.

    >>> import zoo
    >>> from zoo.analysis import analyze, gate_statistics, highway_layer, lesioned
    >>> model = zoo.load("highway_fc50_mnist", weights="runs/fc50")
    >>> stats = gate_statistics(model, images, labels)       # Figs. 2-3, estimation errors
    >>> with lesioned(highway_layer(model, "highway_3"), model=model):
    ...     model.predict(images)                              # highway_3 copies its input
    >>> report = analyze(model, images, labels, "analysis/")  # every figure + analysis.json

- `gates`: gate statistics, block outputs, per-class routing and estimation errors
  (NIPS 2015 Figs. 2-3; Greff et al. 2017 §4.2), in one pass over the data; `highway_layers`,
  which lists a `HighwayStack`'s layers as `StackedLayer` views named as in the per-layer net
  (`highway_1`, ...), so everything here works on stacked nets (`zoo.load(..., stacked=True)`)
  and gives the per-layer net's names and numbers; `highway_layer(model, name)` finds one.
- `lesion`: closing a layer's gates (T := 0, C := 1: it returns its input) and the error
  that costs (NIPS 2015 Fig. 4), and the effective depth; `h_silenced`, a character-aware
  language model with H silenced in its embedder's highway layers (their carry path alone).
- `evolution`: gates.json, the per-epoch mean T that `training.callbacks.GateSummaries`
  writes into a run directory.
- `plots`: the figures; `report.analyze`: all of it into a directory.
- `skips`: the learned skip scales of the static skips (rezero, layerscale, laurel_rw,
  laurel_lr), which scale every example alike and so have no gate for the analyses above;
  gru_gate's update gate z is analysed as T everywhere here.
- `tokens`: per-token gate activity of a character-aware language model, by word frequency,
  length and class (the text counterpart of Fig. 3); `token_report` writes it into a directory.
"""

from zoo.analysis.evolution import GATES_FILE, read_gate_history
from zoo.analysis.gates import (
    GateProbe,
    GateStatistics,
    StackedLayer,
    gate_statistics,
    highway_layer,
    highway_layers,
    skip_layers,
    stages,
)
from zoo.analysis.lesion import (
    effective_depth,
    error_rate,
    h_silenced,
    lesion_errors,
    lesioned,
)
from zoo.analysis.report import REPORT_FILE, analyze
from zoo.analysis.skips import SCALES_FILE, skip_report, skip_scales
from zoo.analysis.tokens import TOKENS_FILE, TokenGates, summarize, token_gates, token_report

__all__ = [
    "GATES_FILE",
    "REPORT_FILE",
    "SCALES_FILE",
    "GateProbe",
    "GateStatistics",
    "StackedLayer",
    "TOKENS_FILE",
    "TokenGates",
    "analyze",
    "effective_depth",
    "error_rate",
    "gate_statistics",
    "h_silenced",
    "highway_layer",
    "highway_layers",
    "lesion_errors",
    "lesioned",
    "read_gate_history",
    "skip_layers",
    "skip_report",
    "skip_scales",
    "stages",
    "summarize",
    "token_gates",
    "token_report",
]
