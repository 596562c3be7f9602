"""The MNIST-family architectures again, for Fashion-MNIST (`*_fashion_mnist`).

Fashion-MNIST has MNIST's shape and classes, and unlike full MNIST it installs offline
here (Debian's `dataset-fashion-mnist`), so these are the nets whose weights can be
trained honestly on these machines. The papers never used it: no paper accuracy.
"""

from zoo import conv_nets, fc_nets  # noqa: F401  (registers the MNIST nets copied here)
from zoo.registry import get, list_models, register_twin

# Why the gated-skip nets' twins ship no weights, on their cards.
_UNTRAINED = (
    "Not trained: 12 epochs of adam_fc on the full Fashion-MNIST take about 92 s an epoch "
    "(18 minutes a net) on a 2-core CPU; the MNIST net ships weights. `highway-zoo pretrain "
    "--only {name}` trains them as every shipped net was."
)

for _name in list_models("*_mnist"):
    _source = get(_name).metadata
    _twin = _name.removesuffix("_mnist") + "_fashion_mnist"
    register_twin(
        _name,
        _twin,
        dataset="fashion_mnist",
        description=_source["description"] + " For Fashion-MNIST (not in the paper).",
        paper_accuracy=None,
        paper_metric=f"not in the paper; the architecture of {_name}",
        **({"weights_note": _UNTRAINED.format(name=_twin)} if _source.get("gated_skip")
           else {}),
    )
