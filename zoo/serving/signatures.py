"""What the exporters build on: the SavedModel export (zoo/serving/saved_model.py), the
TFLite one (zoo/serving/tflite.py, converted from that SavedModel) and the ONNX one
(zoo/serving/onnx.py). The signatures and their archive, and how a version is written into an
export directory (hidden temporaries, a writable base, numbered files never overwritten)."""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

INPUT_NAME = "pixels"
SIGNATURES = ("serving_default", "logits", "gates")
# The SavedModel's signature of TF Serving's classify outputs (string `classes`, float
# `scores`); TFLite and ONNX files go without it (string outputs).
CLASSIFY = "classify"
# Versions are written under this prefix beside the version directories, then renamed.
TMP_PREFIX = ".tmp-"


def highway_layers(model) -> list:
    """`zoo.analysis.highway_layers`: the model's highway layers in graph order, a
    `HighwayStack`'s as per-layer views named as in the per-layer net."""
    from zoo.analysis.gates import highway_layers as analysis_highway_layers

    return analysis_highway_layers(model)


def input_shape_of(model) -> tuple[int, ...]:
    """The per-example input shape (no batch axis) of a single-input model."""
    if len(model.inputs) != 1:
        raise ValueError(
            f"Only single-input models can be exported; {model.name} has {len(model.inputs)}."
        )
    shape = tuple(model.inputs[0].shape[1:])
    if any(d is None for d in shape):
        raise ValueError(f"The input shape must be fully known besides the batch. Got {shape}.")
    return shape


def variables_sha256(model) -> str:
    """A sha256 over the model's weights (names, shapes and values), in order."""
    import numpy as np

    digest = hashlib.sha256()
    for variable in model.weights:
        value = np.ascontiguousarray(np.asarray(variable))
        digest.update(f"{variable.path}:{value.dtype}:{value.shape};".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def provenance(model, name: str, weights_record: dict, input_: dict[str, Any],
               outputs: tuple[str, dict], **fields: Any) -> dict[str, Any]:
    """What every export records of where its model came from (the SavedModel's
    assets.extra record, the ONNX file's metadata): the model, its weights and their hash,
    the input, `outputs` as (its key, its description), then `fields`; the library versions,
    to which a `versions` field adds."""
    import keras
    import tensorflow as tf

    extra_versions = fields.pop("versions", {})
    key, described = outputs
    return {
        "format": 1,
        "name": name,
        "architecture": getattr(model, "architecture", None),
        "overrides": getattr(model, "overrides", {}),
        "weights": weights_record,
        "variables_sha256": variables_sha256(model),
        "input": input_,
        key: described,
        **fields,
        "metadata": getattr(model, "metadata", {}),
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__,
                     **extra_versions},
    }


def model_class_names(model, classes: int) -> list[str] | None:
    """The names of the model's `classes` classes (`model.metadata["class_names"]`); None
    for a model without them, or with names that do not fit its output."""
    names = (getattr(model, "metadata", None) or {}).get("class_names")
    if not isinstance(names, (list, tuple)) or len(names) != classes \
            or not all(isinstance(n, str) for n in names):
        return None
    return list(names)


def signature_fns(model, max_batch: int | None = None,
                  classify: bool = False) -> dict[str, Callable]:
    """The endpoint functions, each taking `pixels` and returning a dict of named tensors;
    with `max_batch`, a request of more images fails with an error saying so; with
    `classify`, also TF Serving's classify outputs, for clients that want labels."""
    import keras
    import tensorflow as tf

    shape = [None, *input_shape_of(model)]
    try:
        logits_layer = model.get_layer("logits")
    except ValueError:
        raise ValueError(
            f"{model.name} has no layer named 'logits'; zoo models name their classifier "
            "layer so (zoo/heads.py)."
        ) from None
    output = model.outputs[0]
    has_probabilities = output is not logits_layer.output
    heads = keras.Model(model.inputs[0], {"logits": logits_layer.output, "output": output})
    gated = highway_layers(model)
    if gated:
        from layers import HighwayStack
        from zoo.analysis.gates import GateProbe

        gate_probe = GateProbe(model, gated)

    def checked(pixels):
        # Without this a wrong-rank image reaches the oneDNN convolution, whose shape CHECK
        # aborts the whole process; EnsureShape fails the request with a clear error instead.
        pixels = tf.ensure_shape(pixels, shape)
        if max_batch is None:
            return pixels
        within = tf.debugging.assert_less_equal(
            tf.shape(pixels, out_type=tf.int64)[0], tf.constant(max_batch, tf.int64),
            message=f"A request may hold at most {max_batch} images (this export's max batch); "
            "split it, or export again with a larger --max-batch.",
        )
        with tf.control_dependencies([within]):
            return tf.identity(pixels)

    def serving_default(pixels):
        out = heads(checked(pixels), training=False)
        probabilities = out["output"] if has_probabilities else tf.nn.softmax(out["logits"])
        return {
            "probabilities": probabilities,
            "class_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int64),
        }

    def logits(pixels):
        return {"logits": heads(checked(pixels), training=False)["logits"]}

    def gates(pixels):
        # A stack's means come from its own loop (mean_transform_gates): its (depth, ...)
        # analysis tensors are TensorLists of unknown batch size, which TFLite cannot convert.
        # Float32 under a mixed-precision policy too, as the signature promises.
        inputs = gate_probe.inputs_net(checked(pixels), training=False)
        activity = {}
        for source, units in gate_probe.sources:
            if isinstance(source, HighwayStack):
                means = source.mean_transform_gates(inputs[source.name])  # float32
                activity.update({unit.name: means[:, unit.index] for unit in units})
            else:
                t = tf.cast(source.transform_gate(inputs[source.name]), tf.float32)
                activity[source.name] = tf.reduce_mean(t, axis=list(range(1, len(t.shape))))
        return activity

    classes = int(logits_layer.output.shape[-1])
    # TF Serving's convention: labels as strings, a net without names gives its ids.
    labels = model_class_names(model, classes) or [str(c) for c in range(classes)]

    def classify_(pixels):
        # Every class, best first (top_k keeps the lower id first on a tie, as argmax picks
        # it): `classes[:, 0]` is serving_default's class_ids, named; a client keeps the
        # first k.
        scores, ids = tf.math.top_k(serving_default(pixels)["probabilities"], k=classes)
        return {"classes": tf.gather(tf.constant(labels), ids), "scores": scores}

    fns = {"serving_default": serving_default, "logits": logits}
    if gated:  # a plain net has no gates; TF Serving refuses a signature with no outputs
        fns["gates"] = gates
    if classify:
        fns[CLASSIFY] = classify_
    return fns


def build_archive(model, max_batch: int | None = None, classify: bool = False):
    import keras
    import tensorflow as tf

    spec = [tf.TensorSpec([None, *input_shape_of(model)], tf.float32, name=INPUT_NAME)]
    archive = keras.export.ExportArchive()
    archive.track(model)
    fns = signature_fns(model, max_batch, classify)
    for endpoint, fn in fns.items():
        archive.add_endpoint(endpoint, fn, input_signature=spec)
    return archive, list(fns)


def write_archive(archive, directory: Path) -> None:
    archive.write_out(str(directory), verbose=False)


# --- writing into an export directory ----------------------------------------------------


def writable_dir(path: Path) -> None:
    """Creates `path` if missing; a clear error when it cannot be a writable directory."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(
            f"{path} is a file, not a directory. Export into a directory: pass another "
            "base_dir (--base-dir); a missing one is created."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"Cannot create the export directory {path}: {err.strerror or err}. Pass a "
            "base_dir (--base-dir) you can write to."
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(
            f"Cannot write to {path}: permission denied. Pass a base_dir (--base-dir) you can "
            "write to, or make it writable."
        )


def numbered_files(model_dir: str | os.PathLike, suffix: str) -> list[int]:
    """The numbers of the `<version><suffix>` files in `model_dir`, sorted."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    pattern = re.compile(r"([0-9]+)" + re.escape(suffix))
    return sorted(int(m.group(1)) for p in model_dir.iterdir()
                  if (m := pattern.fullmatch(p.name)))


def write_numbered_file(model_dir: Path, version: int | None, name: str, suffix: str,
                        kind: str, content: Callable[[], bytes]) -> Path:
    """Writes `content()` as `model_dir/<version><suffix>` (the next free number if None) and
    returns the path: refused before `content` is called if that version exists; written to a
    hidden temporary file, then linked into place, so that a reader never sees half a file and
    an existing file is never overwritten. `kind` names the format in errors ("TFLite")."""
    writable_dir(model_dir)
    if version is not None:
        _refuse_existing_file(model_dir / f"{version}{suffix}", name, suffix, kind)
    data = content()
    tmp = model_dir / f"{TMP_PREFIX}{name}-{secrets.token_hex(4)}{suffix}"
    try:
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            if err.filename is not None:
                raise
            # A failed write names no file: name the directory (the temporary file goes).
            raise OSError(err.errno, err.strerror, str(model_dir)) from err
        while True:
            number = version if version is not None else max(
                numbered_files(model_dir, suffix), default=0) + 1
            target = model_dir / f"{number}{suffix}"
            _refuse_existing_file(target, name, suffix, kind)
            try:
                os.link(tmp, target)  # unlike a rename, fails on an existing file: no overwrite
                return target
            except FileExistsError:
                if version is not None:
                    _refuse_existing_file(target, name, suffix, kind)
                # Another export took this number between the check and the link: take the next.
    finally:
        tmp.unlink(missing_ok=True)


def _refuse_existing_file(target: Path, name: str, suffix: str, kind: str) -> None:
    if target.exists():
        have = numbered_files(target.parent, suffix)
        raise FileExistsError(
            f"{target} already exists; exported {kind} files are never overwritten. Existing "
            f"{kind} versions of {name!r}: {have}. Omit the version to take the next free one "
            f"({max(have, default=0) + 1}), or delete {target} first."
        )
