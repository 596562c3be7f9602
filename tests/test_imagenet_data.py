"""ImageNet through TensorFlow Datasets from the user's own archives (TFDS's manual
directory), tested with tiny archives in the upstream layout made here."""

import numpy as np
import pytest
from data_files import write_imagenet_archives

from training import data as datasets


def test_imagenet_is_prepared_from_the_users_archives_and_comes_at_224(tmp_path):
    write_imagenet_archives(tmp_path / "archives")
    data = datasets.load_dataset("imagenet2012", tmp_path / "archives")
    assert (data.num_train, data.num_test, data.num_classes) == (4, 2, 1000)
    images, labels = zip(*((x.numpy(), int(y)) for x, y in data.train))
    assert all(x.shape == (224, 224, 3) and x.dtype == np.uint8 for x in images)
    # TFDS's label index of the synsets: n01440764 and n01443537 are ImageNet's first two.
    assert sorted(labels) == [0, 0, 1, 1]
    assert all(x.shape == (224, 224, 3) for x, _ in data.test)
    # Prepared once, inside the data directory; the next load reads it as is.
    assert datasets.load_dataset("imagenet2012", tmp_path / "archives").num_train == 4


def test_missing_or_damaged_archives_fail_at_once_saying_what_to_put_where(tmp_path):
    with pytest.raises(datasets.DatasetNotFoundError,
                       match="Needed: ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar"):
        datasets.load_dataset("imagenet2012", tmp_path)
    write_imagenet_archives(tmp_path)
    (tmp_path / "ILSVRC2012_img_val.tar").write_bytes(b"not a tar")
    with pytest.raises(datasets.DatasetFileError, match="ILSVRC2012_img_val.tar: not a tar"):
        datasets.load_dataset("imagenet2012", tmp_path)
