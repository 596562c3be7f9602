"""The highway variants and the branches each one learns.

Pure Python (no Keras), so that the command line and the studies read the names without
importing a backend.

The variants are those of Greff et al. 2017 (Table 1a). They are listed with the branches
each learns, in the order the branches sit side by side in the fused kernel and bias:
H (block state), T (transform gate), C (carry gate). A gate that is not learned is the
constant 1, except that C is 1 - T for "coupled". "plain" has no gates and no carry:
y = H(x) (T = 1, C = 0).
"""

LEARNED_BRANCHES = {
    "coupled": ("h", "t"),
    "full": ("h", "t", "c"),
    "c_only": ("h", "c"),
    "t_only": ("h", "t"),
    "residual": ("h",),
    "plain": ("h",),
}
VARIANTS = tuple(LEARNED_BRANCHES)
