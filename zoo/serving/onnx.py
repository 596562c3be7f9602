"""A zoo network as one ONNX file that onnxruntime runs (the `onnx` extra:
`pip install "highway-zoo[onnx]"` brings tf2onnx, onnx and onnxruntime).

    >>> import zoo, onnxruntime
    >>> path = zoo.export("highway_fc10_mnist", weights="default", format="onnx")
    >>> path                                       # exported/highway_fc10_mnist/1.onnx
    >>> session = onnxruntime.InferenceSession(path)
    >>> probabilities, class_ids = session.run(["probabilities", "class_ids"], {"pixels": x})

One graph holds what the SavedModel's signatures return (zoo/serving/saved_model.py), converted
by tf2onnx from the same functions (ONNX opset `OPSET`), so its outputs equal Keras's to
float32 round-off. An image model takes ``pixels``: float32 ``[batch, *input_shape]``, raw
pixel values 0-255 (the preprocessing is inside the graph), and returns

- ``probabilities`` float32 ``[batch, classes]`` and ``class_ids`` int64 ``[batch]``
  (``serving_default``), ``logits`` float32 ``[batch, classes]``;
- one float32 ``[batch]`` output per highway layer, named by the layer (``gates``: the mean of
  its transform gate per example). The stacked form exports too: its loop over the layers
  becomes an ONNX ``Loop``, and its gates keep the per-layer net's names.

A language model (`lstm_char_*`) takes ``chars``: int32 ``[batch, time, max_word_length]``, the
character ids the Keras model takes (each word spelled as `training.data.text` spells it:
START, its characters' ids, END, zero padding), and returns ``probabilities`` and ``logits``,
float32 ``[batch, time, words]``. Not words, as its SavedModel does: that spelling is made of
TensorFlow string ops (regex replace, a hash table) that have no ONNX operator. Its vocabulary
(`{"words": [...], "chars": [...]}`, the ids' meaning) is in the file's metadata under
`VOCABULARY_KEY`.

The file's metadata (`onnx.ModelProto.metadata_props`, `session.get_modelmeta()
.custom_metadata_map` in onnxruntime) also holds, under `PROVENANCE_KEY`, a JSON record like the
SavedModel's `highway_zoo.json`: architecture, overrides, weights and their sha256, inputs and
outputs, versions.

Files are numbered like the TFLite ones, `<base_dir>/<name>/<version>.onnx`, apart from the
SavedModel versions; each is written to a hidden temporary file and linked into place, so a
reader never sees half a file and an existing file is never overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUFFIX = ".onnx"
# Every onnxruntime since 1.14 runs opset 17; fixed here so the file does not change with
# tf2onnx's default.
OPSET = 17
PROVENANCE_KEY = "highway_zoo"
VOCABULARY_KEY = "highway_zoo.vocabulary"
CHARS_INPUT = "chars"
EXTRA = 'pip install "highway-zoo[onnx]"'


def require() -> None:
    """Refuses in one line, before any work, when the converter is not installed."""
    try:
        import onnx  # noqa: F401
        import tf2onnx  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name not in ("onnx", "tf2onnx"):
            raise  # installed but broken: its own error says more
        raise ValueError(
            f"format='onnx' needs {err.name}, which is not installed: {EXTRA} (tf2onnx, onnx "
            "and onnxruntime), or pip install -e '.[onnx]' in a checkout.") from None


def versions(model_dir) -> list[int]:
    """The numbers of the `<version>.onnx` files in `model_dir`, sorted."""
    from zoo.serving.signatures import numbered_files

    return numbered_files(model_dir, SUFFIX)


def _graph(model):
    """The function to convert, its input spec, and the names of its dynamic axes."""
    import keras
    import tensorflow as tf

    from zoo.serving.language_model import is_language_model
    from zoo.serving.signatures import INPUT_NAME, input_shape_of, signature_fns

    if not is_language_model(model):
        fns = signature_fns(model)

        def image_model(pixels):
            # Every signature's outputs from one graph. Grappler, which tf2onnx runs, merges
            # their common ops: a per-layer net's gates add no matmul or convolution to the
            # forward pass (a stack's gates are a loop of their own).
            outputs = {}
            for fn in fns.values():
                outputs.update(fn(pixels))
            return outputs

        spec = tf.TensorSpec([None, *input_shape_of(model)], tf.float32, name=INPUT_NAME)
        return image_model, spec, ("batch",)

    # A language model: character ids in, as the Keras model takes them.
    logits_layer = model.get_layer("logits")
    has_probabilities = model.outputs[0] is not logits_layer.output
    net = keras.Model(model.inputs[0], {"logits": logits_layer.output, "output": model.outputs[0]})

    def language_model(chars):
        out = net(chars, training=False)
        probabilities = out["output"] if has_probabilities else tf.nn.softmax(out["logits"])
        return {"probabilities": probabilities, "logits": out["logits"]}

    width = int(model.inputs[0].shape[-1])
    spec = tf.TensorSpec([None, None, width], model.inputs[0].dtype, name=CHARS_INPUT)
    return language_model, spec, ("batch", "time")


def convert(model, metadata: dict[str, str] | None = None):
    """The `onnx.ModelProto` of `model`, its dynamic axes named ("batch", and "time" for a
    language model), with `metadata` in its `metadata_props`."""
    import tensorflow as tf
    import tf2onnx

    require()
    fn, spec, axes = _graph(model)
    proto, _ = tf2onnx.convert.from_function(
        tf.function(fn, input_signature=[spec]), input_signature=[spec], opset=OPSET,
        custom_op_handlers={"TensorListFromTensor": (_tensor_list_from_tensor, [])})
    _name_dynamic_axes(proto.graph, axes)
    for key, value in (metadata or {}).items():
        proto.metadata_props.add(key=key, value=value)
    return proto


def _tensor_list_from_tensor(ctx, node, name, args) -> None:
    """A TensorList made from a tensor is that tensor: its reads (TensorListGetItem) become
    Gathers from it. tf2onnx makes it so only where a while loop takes the list, and leaves an
    op no runtime has elsewhere: in a HighwayStack no deeper than its `unroll`, which reads its
    per-layer weights with no loop (layers/_stack_loop.py)."""
    node.type = "Identity"
    ctx.copy_dtype(node.input[0], node.output[0])
    ctx.copy_shape(node.input[0], node.output[0])


def _name_dynamic_axes(graph, axes: tuple[str, ...]) -> None:
    """tf2onnx names an unknown dimension `unk__<n>`; every input and output here starts with
    the same dynamic axes (the batch, a language model's time), so they are named so."""
    for value in [*graph.input, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        for dim, axis in zip(dims, axes):
            if not dim.HasField("dim_value"):
                dim.dim_param = axis


def export(model, model_dir: Path, version: int | None, name: str,
           weights_record: dict[str, Any], vocabulary: dict | None = None) -> Path:
    """Writes `model` as `model_dir/<version>.onnx` (the next free number if None); called by
    `zoo.export(..., format="onnx")`, which checks the arguments and the vocabulary."""
    from zoo.serving.signatures import write_numbered_file

    def content() -> bytes:
        metadata = {PROVENANCE_KEY: json.dumps(
            _provenance(model, name, weights_record, vocabulary), default=str)}
        if vocabulary is not None:
            metadata[VOCABULARY_KEY] = json.dumps(vocabulary)
        return convert(model, metadata).SerializeToString()

    return write_numbered_file(model_dir, version, name, SUFFIX, "ONNX", content)


def _provenance(model, name: str, weights_record: dict, vocabulary: dict | None) -> dict:
    import tf2onnx

    from zoo.serving.language_model import is_language_model
    from zoo.serving.signatures import INPUT_NAME, highway_layers, input_shape_of, provenance

    if is_language_model(model):
        width = int(model.inputs[0].shape[-1])
        input_ = {"name": CHARS_INPUT, "dtype": str(model.inputs[0].dtype),
                  "shape": [None, None, width],
                  "values": "character ids of words as training.data.text spells them",
                  "vocabulary": VOCABULARY_KEY if vocabulary is not None else None}
        outputs = {"probabilities": "float32 [batch, time, words]",
                   "logits": "float32 [batch, time, words]"}
    else:
        input_ = {"name": INPUT_NAME, "dtype": "float32",
                  "shape": [None, *input_shape_of(model)],
                  "values": "raw pixel values 0-255 as stored in the dataset"}
        outputs = {"probabilities": "float32 [batch, classes]", "class_ids": "int64 [batch]",
                   "logits": "float32 [batch, classes]",
                   **{layer.name: "float32 [batch] (mean transform gate)"
                      for layer in highway_layers(model)}}
    return provenance(model, name, weights_record, input_, ("outputs", outputs),
                      versions={"tf2onnx": tf2onnx.__version__, "opset": OPSET})
