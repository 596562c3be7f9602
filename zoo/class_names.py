"""The names of each dataset's classes, by dataset name: what `model.metadata["class_names"]`,
`highway-zoo predict` and the export's `classify` signature say instead of a bare class id.

The one table of them: `training.data.prepared_images` reads its class folders' names from
here too (the `zoo` package imports nothing of `training`). Each list is in label-id order,
as the dataset's own files give it: CIFAR-10's `batches.meta.txt`, CIFAR-100's
`fine_label_names.txt` (the fine labels, which the zoo trains on), Fashion-MNIST's README,
MNIST's digits.

ImageNet (`imagenet2012`) has none here: TFDS's labels are WordNet ids (`n01440764`), and the
readable names keras.applications prints are downloaded on first use, which the zoo never
does. Its nets, like a net given its own `classes=N`, answer with class ids.
"""

from __future__ import annotations

CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "mnist": tuple(str(digit) for digit in range(10)),
    "fashion_mnist": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"),
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                "truck"),
    "cifar100": (
        "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle",
        "bottle", "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle",
        "caterpillar", "cattle", "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch",
        "crab", "crocodile", "cup", "dinosaur", "dolphin", "elephant", "flatfish", "forest",
        "fox", "girl", "hamster", "house", "kangaroo", "keyboard", "lamp", "lawn_mower",
        "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
        "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear",
        "pickup_truck", "pine_tree", "plain", "plate", "poppy", "porcupine", "possum", "rabbit",
        "raccoon", "ray", "road", "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk",
        "skyscraper", "snail", "snake", "spider", "squirrel", "streetcar", "sunflower",
        "sweet_pepper", "table", "tank", "telephone", "television", "tiger", "tractor", "train",
        "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
    ),
}


def class_names(dataset: str | None, classes: int | None) -> list[str] | None:
    """The names of `dataset`'s classes for a net with `classes` outputs; None where they are
    not known (a dataset without a table here, a net of another number of classes, no top)."""
    names = CLASS_NAMES.get(dataset) if isinstance(dataset, str) else None
    if names is None or classes != len(names):
        return None
    return list(names)


def label(class_id: int, names: list[str] | tuple[str, ...] | None) -> str:
    """Class `class_id`'s name, or its id as a string where the classes have no names (the
    labels TF Serving's classify convention gives a net without a vocabulary)."""
    return str(class_id) if names is None else names[class_id]
