"""The transfer experiment (`python -m training.experiments.transfer`) on a tiny budget."""

import json

import keras
import numpy as np
import pytest

import zoo
from training.experiments import transfer


def test_the_pretrained_body_is_the_shipped_one_and_the_probe_trains_only_the_head():
    shipped = zoo.load(transfer.SOURCE, weights="default")
    for method in ("fine-tune", "linear probe"):
        model = transfer.build(method, seed=0)
        body = model.layers[0]
        stem = keras.ops.convert_to_numpy(body.get_layer("stem_conv").kernel)
        np.testing.assert_array_equal(stem, shipped.get_layer("stem_conv").get_weights()[0])
        head = model.get_layer("predictions")
        expected = head.count_params() if method == "linear probe" else model.count_params()
        assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == expected
    scratch = transfer.build("scratch", seed=0).layers[0].get_layer("stem_conv").kernel
    assert not np.array_equal(keras.ops.convert_to_numpy(scratch),
                              shipped.get_layer("stem_conv").get_weights()[0])


def test_a_tiny_run_writes_its_table_json_and_figure(tmp_path, capsys):
    with pytest.warns(UserWarning):  # the offline MNIST sample says it is a sample
        assert transfer.main(["--sizes", "40", "--seeds", "2", "--steps", "1",
                              "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "transfer.json").read_text())
    assert len(result["runs"]) == 3 * 2 and result["num_test"] == 1000
    rows = {(r["size"], r["method"]): r for r in result["summary"]}
    for size in (40,):
        for method in transfer.METHODS:
            accs = [r["test_accuracy"] for r in result["runs"]
                    if r["size"] == size and r["method"] == method]
            assert rows[size, method]["mean"] == pytest.approx(np.mean(accs))
            assert rows[size, method]["std"] == pytest.approx(np.std(accs, ddof=1))
    assert (tmp_path / "transfer.png").stat().st_size > 10_000
    assert "| 40 |" in capsys.readouterr().out
