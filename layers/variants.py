"""The highway variants and the branches each one learns.

Pure Python (no Keras), so that the command line and the studies read the names without
importing a backend.

`VARIANTS` are those of Greff et al. 2017 (Table 1a). They are listed with the branches
each learns, in the order the branches sit side by side in the fused kernel and bias:
H (block state), T (transform gate), C (carry gate). A gate that is not learned is the
constant 1, except that C is 1 - T for "coupled". "plain" has no gates and no carry:
y = H(x) (T = 1, C = 0).

`GATED_SKIPS` are later forms of the skip path, each learning H alone in the fused kernel and
bias plus weights of its own (`extra_weights`):

- "rezero": y = x + a·H(x), one scalar a, 0 at first (ReZero, Bachlechner et al. 2020; the
  SkipInit of De & Smith 2020 is the same form).
- "layerscale": y = x + diag(l)·H(x), l per channel, small at first (CaiT, Touvron et al. 2021).
- "gru_gate": GTrXL's GRU-type gate around H (Parisotto et al. 2019).
- "laurel_rw": y = a·H(x) + b·x, two learned scalars, 1 at first (LAuReL-RW, Menghani et al.
  2025).
- "laurel_lr": y = H(x) + x + B·A·x, A of rank `laurel_rank`, B 0 at first (LAuReL-LR).

`ALL_VARIANTS` is every name the highway layers take.
"""

LEARNED_BRANCHES = {
    "coupled": ("h", "t"),
    "full": ("h", "t", "c"),
    "c_only": ("h", "c"),
    "t_only": ("h", "t"),
    "residual": ("h",),
    "plain": ("h",),
    "rezero": ("h",),
    "layerscale": ("h",),
    "gru_gate": ("h",),
    "laurel_rw": ("h",),
    "laurel_lr": ("h",),
}
VARIANTS = ("coupled", "full", "c_only", "t_only", "residual", "plain")
GATED_SKIPS = ("rezero", "layerscale", "gru_gate", "laurel_rw", "laurel_lr")
ALL_VARIANTS = VARIANTS + GATED_SKIPS

# The gated skips whose output is y = s_H·H(x) + s_x·x with per-layer scales (a scalar or a
# per-channel vector): what HighwayStack's fast paths run with their written-out backward pass.
SCALED_SKIPS = ("rezero", "layerscale", "laurel_rw")

# What the gate analyses (zoo.analysis: NIPS 2015 Figs. 2-4, routing, per-token gates, the
# TensorBoard gate summaries, the export's "gates" signature) read of each gated skip:
# - GTrXL's update gate z depends on the input and weighs the transform path exactly as T does
#   in the coupled layer (out = z·g + (1 - z)·x against T·H + (1 - T)·x), so for "gru_gate" the
#   layers' `transform_gate` is z (and `carry_gate` 1 - z), and every analysis reads z as T;
# - the others learn their skip per layer, the same for every example (a scalar, a vector per
#   channel, a fixed low-rank map): nothing is routed, so they have no T to analyse, only
#   their learned scales (`zoo.analysis.skips`).
INPUT_GATED_SKIPS = ("gru_gate",)
STATIC_SKIPS = ("rezero", "layerscale", "laurel_rw", "laurel_lr")

# What a static skip learns, for `no_routing`.
_STATIC_SCALES = {
    "rezero": "a learned scalar per layer",
    "layerscale": "a learned scale per channel and layer",
    "laurel_rw": "two learned scalars per layer",
    "laurel_lr": "a learned low-rank map B·A per layer",
}


def unknown_variant(variant, argument="variant") -> str:
    """The one-line message for a name that is not a variant, listing those that are."""
    return (f"Unknown highway variant. Expected one of {ALL_VARIANTS} (Greff et al. 2017, "
            f"Table 1a, then the gated skips). Received: {argument}={variant!r}")


def default_laurel_rank(channels: int) -> int:
    """`laurel_rank=None`: an eighth of the channels, at least 1."""
    return max(1, channels // 8)


def parameter_count(variant: str, channels: int, kernel_area: int = 1,
                    laurel_rank: int | None = None) -> int:
    """Parameters of one highway layer of `channels` channels; `kernel_area` = kh·kw for a
    convolution (1 for a dense layer). With k = kernel_area and d = channels:

    - Greff's variants: n·(k·d² + d), n the learned branches;
    - rezero: k·d² + d + 1; layerscale: k·d² + 2d; laurel_rw: k·d² + d + 2;
    - gru_gate: 7·k·d² + 2d (H, then W_r, W_z, W_g, U_r, U_z, U_g and b_g);
    - laurel_lr: k·d² + d + 2·r·d (A: d x r, B: r x d, per pixel for a convolution).
    """
    if variant not in LEARNED_BRANCHES:
        raise ValueError(unknown_variant(variant))
    d, k = channels, kernel_area
    h = k * d * d + d
    extra = {
        "rezero": 1,
        "layerscale": d,
        "gru_gate": 6 * k * d * d + d,
        "laurel_rw": 2,
        "laurel_lr": 2 * d * (laurel_rank or default_laurel_rank(d)),
    }
    if variant in extra:
        return h + extra[variant]
    return len(LEARNED_BRANCHES[variant]) * h


def has_transform_gate(variant: str) -> bool:
    """Whether the gate analyses have an input-dependent T to read in a layer of `variant`:
    a learned T (coupled, full, t_only) or GTrXL's update gate z (gru_gate, read as T)."""
    if variant not in LEARNED_BRANCHES:
        raise ValueError(unknown_variant(variant))
    return "t" in LEARNED_BRANCHES[variant] or variant in INPUT_GATED_SKIPS


def no_routing(variant: str) -> str:
    """The one line that says why a static skip (`STATIC_SKIPS`) has nothing for the gate
    analyses."""
    if variant not in STATIC_SKIPS:
        raise ValueError(f"{variant!r} is not one of the static skips {STATIC_SKIPS}")
    return (f"no routing: {variant} scales every example alike ({_STATIC_SCALES[variant]}), "
            "so Fig. 2-4, routing and per-token gates do not apply")


def require_transform_bias(variant: str, transform_bias, example: str) -> None:
    """Refuses, in one line, a variant with a transform gate built without its initial bias
    b_T (the nets registered with a gated skip have none to pass on); `example` names a value
    to pass and whose it is, e.g. "-2.0 (Kim's)"."""
    if transform_bias is None and "t" in LEARNED_BRANCHES.get(variant, ()):
        raise ValueError(f"variant={variant!r} has a transform gate: pass its initial bias, "
                         f"e.g. transform_bias={example}; the registered gated-skip nets have "
                         "none.")
