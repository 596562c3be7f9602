"""Which zoo models the per-family tests build: one of each family, kept small."""

import zoo

# Overrides that keep the big families quick to build, run and convert in a test: the
# builder is what a family's tests exercise, not the 25M parameters of its registered nets.
SMALL = {
    "bottleneck_imagenet": {"input_shape": (32, 32, 3), "width_multiplier": 0.125,
                            "stage_blocks": (1, 1, 1, 1)},
    "bn_cifar": {"blocks_per_stage": 1},
}


# Families whose input is not an image: their own tests (tests/test_char_lm.py) do what the
# image families' shared tests do (features, backends, export) with character-id inputs.
NOT_IMAGES = ("char_lm",)


def one_per_family():
    """(name, overrides): the smallest registered image model of each family, shrunk where
    `SMALL` says, and the stacked form of the FC nets."""
    smallest = {}
    for name in zoo.list_models():
        info = zoo.describe(name)
        family = info["family"]
        if family in NOT_IMAGES:
            continue
        if family not in smallest or info["params"] < smallest[family][1]:
            smallest[family] = (name, info["params"])
    cases = [(name, dict(SMALL.get(zoo.describe(name)["family"], {})))
             for name, _ in sorted(smallest.values())]
    stackable = [name for name, _ in cases if "stacked" in zoo.describe(name)["overridable"]]
    return cases + [(name, {"stacked": True}) for name in stackable]
