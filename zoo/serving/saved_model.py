"""Export a zoo network as a TensorFlow SavedModel that TF Serving loads as it is.

    >>> import zoo
    >>> zoo.export("highway_fc10_mnist", weights="runs/fc10")   # -> exported/highway_fc10_mnist/1
    >>> zoo.export(model, base_dir="exported", version=7)

Layout (TF Serving's: numeric version directories, the highest served by default)::

    <base_dir>/models.config                  ModelServerConfig, absolute base paths
    <base_dir>/models.docker.config           the same, base paths under /models (docker -v)
    <base_dir>/<name>/<version>/saved_model.pb
                               /variables/...
                               /assets.extra/tf_serving_warmup_requests
                               /assets.extra/highway_zoo.json   (provenance)

Signatures, all taking ``pixels``: float32 ``[batch, *input_shape]``, raw pixel values 0-255
as stored in the dataset (the preprocessing is inside the graph):

- ``serving_default``: ``probabilities`` float32 ``[batch, classes]``, ``class_ids`` int64
  ``[batch]``;
- ``logits``: ``logits`` float32 ``[batch, classes]``;
- ``gates``: one float32 ``[batch]`` output per highway layer, named by the layer: the mean of
  its transform gate T(x) over the layer's units (and positions, for convolutions), per example
  (for gru_gate layers, GTrXL's update gate z; the static skips have none, as plain layers).
  A `HighwayStack`'s layers each get their own output, named as in the per-layer net
  (``highway_1``, ...; `zoo.analysis.highway_layers`), computed by one loop over the stack.
- ``classify``: TF Serving's classify outputs, ``classes`` string ``[batch, classes]`` and
  ``scores`` float32 ``[batch, classes]``: every class, best first, named as
  ``model.metadata["class_names"]`` names them (`zoo.class_names`; ``"0"``, ``"1"``, ... for
  a net without names). It takes ``pixels`` like the others, so a client calls it through
  the Predict API (``signature_name="classify"``), not the Classify RPC (which sends
  ``tf.Example``s).

A version is written to a hidden temporary directory beside the version directories and
renamed into place, so a server polling the directory never sees a half-written version;
an existing version is never overwritten.

A language model (family `char_lm`) gets other signatures, which take words:
zoo/serving/language_model.py.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import secrets
import shutil
import socket
from pathlib import Path
from typing import Any

from zoo.serving.signatures import (
    CLASSIFY,
    INPUT_NAME,
    SIGNATURES,
    TMP_PREFIX,
    highway_layers,
    input_shape_of,
    model_class_names,
    provenance,
)
from zoo.serving.signatures import build_archive as _build_archive
from zoo.serving.signatures import writable_dir as _writable_dir
from zoo.serving.signatures import write_archive as _write_archive

FORMATS = ("tf_saved_model", "tflite", "onnx")
ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
METADATA_FILE = "highway_zoo.json"
CONFIG_FILE = "models.config"
DOCKER_CONFIG_FILE = "models.docker.config"
DOCKER_MODELS_ROOT = "/models"

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_VERSION_DIR = re.compile(r"[0-9]+")
# TF Serving reads version numbers as int64.
MAX_VERSION = 2**63 - 1
# Images per request: a request of 100,000 images to the exported conv net peaked at 20.9 GB.
DEFAULT_MAX_BATCH = 1024
BATCHING_CONFIG_FILE = "batching.config"
# A version's temporary directory names its writer, so that a killed writer's can be removed.
_TMP_DIR = re.compile(r"\.tmp-.*\+(?P<host>[^+]+)\+(?P<pid>[0-9]+)\+[0-9a-f]+")


class ExportWriteError(OSError):
    """A version could not be written (disk full, ...); nothing was exported."""


def export(
    model_or_name: Any,
    base_dir: str | os.PathLike = "exported",
    version: int | None = None,
    weights: str | os.PathLike | None = None,
    random_weights: bool = False,
    name: str | None = None,
    warmup: bool = True,
    max_batch: int = DEFAULT_MAX_BATCH,
    batching_config: bool = False,
    format: str = "tf_saved_model",
    quantize: str | None = None,
    representative: Any = None,
    **overrides: Any,
) -> Path:
    """Writes `model_or_name` as SavedModel version `version` of model `name` under `base_dir`.

    Args:
        model_or_name: a zoo model (`zoo.load(...)`, any functional classifier with a
            "logits" layer), a registered architecture name, or a preset (run) directory,
            which brings its weights (and a language model's vocabulary).
        base_dir: the model base path; created if missing. `models.config` in it is
            rewritten to list every model exported there.
        version: a positive integer; None takes the next free number (1 for a new model).
            An existing version is refused, never overwritten.
        weights: for a name only: a run directory, a `.weights.h5` file (with its
            `.sha256`) or "default", as for `zoo.load`.
        random_weights: for a name only: export a freshly initialised network (timing,
            testing). A name with neither `weights` nor `random_weights=True` is refused.
        name: the served model name (default: the architecture name).
        warmup: write `assets.extra/tf_serving_warmup_requests` (one batch-1 request per
            signature), which TF Serving replays before it marks the version available.
        format: "tf_saved_model", or "tflite" for one file `<name>/<version>.tflite` with
            the same signatures, numbered apart from the SavedModels, never overwritten, not
            listed in models.config (zoo/serving/tflite.py; run it with `zoo.serving.tflite.load`);
            or "onnx" for one file `<name>/<version>.onnx` with the same outputs in one graph,
            numbered likewise, for onnxruntime (zoo/serving/onnx.py; the `onnx` extra). A
            language model's ONNX file takes character ids, not words.
        quantize: "int8" with format="tflite": a full-integer file
            `<name>/<version>.int8.tflite` (numbered apart from the float ones), calibrated on
            `representative`. For a Keras int8 model, see `zoo.quantize`.
        representative: with quantize="int8": the calibration images, `(n, *input_shape)` raw
            pixel values (a few hundred of the model's training images), or a function taking
            the resolved model and returning them (the command line's reads its dataset).
        max_batch: the most images one request may hold; a larger request fails with an
            error saying so (unbounded, one request of 100,000 images took 20.9 GB).
        batching_config: also write `base_dir/batching.config`, TF Serving's batching
            parameters with this `max_batch` (`--enable_batching
            --batching_parameters_file=...`).
        **overrides: for a name only: architecture overrides, as for `zoo.load`.

    Returns:
        The version directory, e.g. `exported/highway_fc10_mnist/1`.
    """
    _check_arguments(version, max_batch, format, quantize)
    version = None if version is None else int(version)
    if format == "onnx":
        from zoo.serving import onnx

        onnx.require()  # before the model is built
    model, weights_record = _resolve_model(model_or_name, weights, random_weights, overrides)
    name = name or getattr(model, "architecture", None) or model.name
    from zoo.serving import language_model as lm_export

    # A language model takes words: its vocabulary is checked (refused if missing) first.
    vocabulary = lm_export.vocabulary_of(model) if lm_export.is_language_model(model) else None
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            "A served model name takes letters, digits, '_', '.' and '-', and does not start "
            f"with '.' or '-'. Received: name={name!r}"
        )
    policy = model.dtype_policy
    if format != "tf_saved_model" and policy.compute_dtype != "float32":
        # TFLite has no bfloat16 kernels, and tf2onnx writes a file onnxruntime cannot load.
        raise ValueError(
            f"--format {format} converts float32 nets; {name} computes in {policy.name} (as "
            "it was trained or loaded): export it with --dtype float32 (zoo.load(..., "
            "dtype='float32')), the same float32 weights.")
    if format == "tflite":
        if vocabulary is not None:
            raise ValueError("A language model is exported as a SavedModel only: its spelling "
                             "of words uses string ops outside TFLite's builtins.")
        from zoo.serving import tflite

        if quantize is not None and callable(representative):
            representative = representative(model)
        return tflite.export(model, Path(base_dir) / name, version, name, quantize,
                             representative)
    if format == "onnx":
        from zoo.serving import onnx

        return onnx.export(model, Path(base_dir) / name, version, name, weights_record, vocabulary)

    return _export_saved_model(model, Path(base_dir), name, version, weights_record, warmup,
                               vocabulary, max_batch, batching_config)


def _export_saved_model(model, base: Path, name: str, version: int | None, weights_record,
                        warmup: bool, vocabulary, max_batch: int,
                        batching_config: bool) -> Path:
    """export's SavedModel: a new version directory of `name` under `base`, listed in
    models.config."""
    from zoo.serving import language_model as lm_export

    model_dir = base / name
    _writable_dir(base)
    previous_config = read_model_config(base)  # a broken config is refused before any work
    _writable_dir(model_dir)
    remove_stale_temporary_dirs(model_dir)
    if version is not None:
        _refuse_existing(model_dir / str(version), name)

    if vocabulary is not None:
        archive, signatures = lm_export.build_archive(model, vocabulary, max_batch)
    else:
        archive, signatures = _build_archive(model, max_batch, classify=True)
    target = _write_version(model_dir, version, name, archive, signatures, model,
                            weights_record, warmup, vocabulary, max_batch)
    write_model_config(base, previous_config)
    if batching_config:
        write_batching_config(base, max_batch)
    return target


def _check_arguments(version: Any, max_batch: Any, format: str, quantize: str | None) -> None:
    """export's refusals of its arguments, before any model is built."""
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "Exporting a SavedModel needs the TensorFlow backend; set KERAS_BACKEND=tensorflow. "
            f"Received backend: {keras.backend.backend()!r}"
        )
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, numbers.Integral) or version < 1
    ):
        raise ValueError(f"version must be a positive integer. Received: version={version!r}")
    if version is not None and version > MAX_VERSION:
        raise ValueError(
            f"version must be at most {MAX_VERSION}: TF Serving reads versions as int64. "
            f"Received: version={version!r}"
        )
    if isinstance(max_batch, bool) or not isinstance(max_batch, numbers.Integral) or max_batch < 1:
        raise ValueError(
            f"max_batch must be a positive integer. Received: max_batch={max_batch!r}"
        )
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}. Received: format={format!r}")
    if quantize is not None and format != "tflite":
        raise ValueError(
            f"quantize={quantize!r} applies to format='tflite' (a full-integer file); for a "
            f"Keras int8 model use zoo.quantize(model). Received: format={format!r}")


def _write_version(model_dir: Path, version: int | None, name: str, archive, signatures,
                   model, weights_record, warmup: bool, vocabulary, max_batch: int) -> Path:
    """Writes the SavedModel, its warm-up requests and provenance into a temporary directory,
    then renames it into place as `version` (None: the next free one); nothing is left on a
    failure."""
    from zoo.serving import language_model as lm_export

    writer = f"{socket.gethostname()}+{os.getpid()}"
    tmp = model_dir / f"{TMP_PREFIX}{name}+{writer}+{secrets.token_hex(4)}"
    tmp.mkdir(mode=0o755)
    try:
        try:
            _write_archive(archive, tmp)
            extra = tmp / ASSETS_EXTRA
            extra.mkdir(exist_ok=True)
            if warmup and vocabulary is not None:
                _write_records(extra / WARMUP_FILE, lm_export.warmup_requests(name, signatures))
            elif warmup:
                write_warmup_requests(extra / WARMUP_FILE, name, input_shape_of(model), signatures)
            record = {**_provenance(model, name, weights_record, warmup, vocabulary),
                      "max_batch": max_batch}
            (extra / METADATA_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
        except Exception as err:
            if not _is_out_of_space(err):
                raise
            raise ExportWriteError(
                f"No space left on the device to write {name} under {model_dir}; nothing was "
                "exported (its temporary directory is removed). Free some space and export again."
            ) from err
        target = _rename_into_place(tmp, model_dir, version, name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _is_out_of_space(err: BaseException) -> bool:
    """An ENOSPC, from Python (OSError) or from TensorFlow's file system (an OpError)."""
    import errno

    import tensorflow as tf

    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    # TensorFlow reports a failed write with the OS's message and no errno.
    return isinstance(err, tf.errors.OpError) and os.strerror(errno.ENOSPC) in err.message


def remove_stale_temporary_dirs(model_dir: Path) -> list[Path]:
    """Removes the temporary version directories of exports on this machine that were killed
    (their process is gone); returns them. Live exports' and other machines' stay."""
    removed = []
    for path in model_dir.glob(f"{TMP_PREFIX}*"):
        match = _TMP_DIR.fullmatch(path.name)
        if not (match and path.is_dir() and match["host"] == socket.gethostname()):
            continue
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except PermissionError:
            pass  # alive, another user's
    return removed


def write_batching_config(base_dir: str | os.PathLike, max_batch: int) -> Path:
    """Writes TF Serving's batching parameters (a BatchingParameters text proto) beside
    models.config: requests are batched up to `max_batch` images, larger ones refused."""
    from zoo.files import write_text

    path = Path(base_dir) / BATCHING_CONFIG_FILE
    write_text(
        path,
        "# BatchingParameters written by `highway-zoo export --batching-config`. Serve with:\n"
        "#   tensorflow_model_server --enable_batching "
        f"--batching_parameters_file={path.resolve()} ...\n"
        f"max_batch_size {{ value: {max_batch} }}\n"
        "batch_timeout_micros { value: 1000 }\n"
        f"max_enqueued_batches {{ value: {max(1, 4096 // max_batch)} }}\n"
        f"num_batch_threads {{ value: {os.cpu_count() or 1} }}\n",
        overwrite=True,
    )
    return path


# --- the model and its signatures -------------------------------------------------------------


def _resolve_model(model_or_name, weights, random_weights, overrides):
    """The model to export and the record of its weights."""
    import zoo
    from zoo import loading

    if isinstance(model_or_name, (str, os.PathLike)) and not random_weights \
            and weights is None and loading.is_preset(model_or_name):
        # A preset (a run directory) brings its architecture, overrides and weights.
        model = zoo.load(model_or_name, **overrides)
        return model, _weights_record(model.architecture, model_or_name)
    if isinstance(model_or_name, str):
        if weights is None and not random_weights:
            raise ValueError(
                f"Exporting {model_or_name!r} with no weights would serve an untrained network. "
                "Pass weights=RUN_DIR (or a .weights.h5 file, or 'default'), i.e. "
                "`highway-zoo export NAME --run RUN_DIR`, or random_weights=True "
                "(`--random-weights`) to export a freshly initialised one on purpose."
            )
        if weights is not None and random_weights:
            raise ValueError(
                f"Pass either weights= or random_weights=True, not both. Received: "
                f"weights={weights!r}, random_weights=True"
            )
        model = zoo.load(model_or_name, weights=weights, **overrides)
        return model, _weights_record(model_or_name, weights)
    if weights is not None or random_weights or overrides:
        raise ValueError(
            "weights=, random_weights= and overrides apply to an architecture name only; "
            "a model object is exported with the weights it has."
        )
    if not hasattr(model_or_name, "inputs") or not hasattr(model_or_name, "get_layer"):
        raise ValueError(
            "model_or_name must be a registered architecture name or a functional keras.Model. "
            f"Received: {type(model_or_name).__name__}"
        )
    return model_or_name, {"source": "model object", "sha256": None}


def _weights_record(name: str, weights) -> dict[str, Any]:
    from zoo import pretrained
    from zoo.weights import read_model_dir, verify

    if weights is None:
        return {"source": None, "sha256": None, "random_init": True}
    if isinstance(weights, str) and (weights == "default" or weights in pretrained.tags(name)):
        tag = pretrained.resolve(name, weights)
        entry = pretrained.record(name, tag)
        return {"source": weights, "tag": tag, "file": entry["file"], "sha256": entry["sha256"]}
    path = Path(weights)
    weights_path = read_model_dir(path, expected=name)[0] if path.is_dir() else path
    return {"source": str(path.resolve()), "sha256": verify(weights_path)}


# --- warm-up requests and provenance ----------------------------------------------------------


def warmup_requests(name: str, input_shape, signatures=SIGNATURES) -> list:
    """One `PredictionLog` per signature: a batch of one mid-grey image."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    pixels = np.full((1, *input_shape), 128.0, dtype=np.float32)
    logs = []
    for signature in signatures:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        request.model_spec.signature_name = signature
        request.inputs[INPUT_NAME].CopyFrom(tf.make_tensor_proto(pixels))
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return logs


def write_warmup_requests(
    path: str | os.PathLike, name: str, input_shape, signatures=SIGNATURES
) -> Path:
    """Writes the warm-up requests as the TFRecord file TF Serving replays on load."""
    return _write_records(path, warmup_requests(name, input_shape, signatures))


def _write_records(path: str | os.PathLike, logs: list) -> Path:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return Path(path)


def _provenance(model, name: str, weights_record: dict, warmup: bool,
                vocabulary: dict | None = None) -> dict[str, Any]:
    names = {}
    if vocabulary is not None:  # a language model: words in
        from zoo.serving import language_model as lm_export

        input_ = lm_export.input_record(model, vocabulary)
        outputs = lm_export.output_record(vocabulary)
    else:
        input_, outputs = _image_records(model)
        # What `classify` answers with, for `highway-zoo predict` (None: the ids).
        classes = int(model.get_layer("logits").output.shape[-1])
        names = {"class_names": model_class_names(model, classes)}
    return provenance(model, name, weights_record, input_, ("signatures", outputs),
                      warmup_requests=WARMUP_FILE if warmup else None, **names)


def _image_records(model) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    gated = [layer.name for layer in highway_layers(model)]
    shape = list(input_shape_of(model))
    outputs = {
        "serving_default": {
            "probabilities": "float32 [batch, classes]",
            "class_ids": "int64 [batch]",
        },
        "logits": {"logits": "float32 [batch, classes]"},
    }
    if gated:
        outputs["gates"] = {layer: "float32 [batch]" for layer in gated}
    outputs[CLASSIFY] = {"classes": "string [batch, classes]: class names, best first "
                                    "(ids where the model names none)",
                         "scores": "float32 [batch, classes]: their probabilities"}
    return ({"name": INPUT_NAME, "dtype": "float32", "shape": [None, *shape],
             "values": "raw pixel values 0-255 as stored in the dataset"}, outputs)


# --- the directory layout ---------------------------------------------------------------------


def versions(model_dir: str | os.PathLike) -> list[int]:
    """The numeric version directories under `model_dir`, sorted (what TF Serving sees)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(
        int(p.name) for p in model_dir.iterdir() if p.is_dir() and _VERSION_DIR.fullmatch(p.name)
    )


def _refuse_existing(target: Path, name: str) -> None:
    if target.exists():
        have = versions(target.parent)
        raise FileExistsError(
            f"Version {target.name} of {name!r} already exists at {target}; exported versions "
            f"are never overwritten. Existing versions: {have}. Omit the version to take the "
            f"next free one ({max(have, default=0) + 1}), or delete {target} first."
        )


def _rename_into_place(tmp: Path, model_dir: Path, version: int | None, name: str) -> Path:
    """Renames the finished `tmp` to the version directory (the next free one if None)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    while True:
        number = version if version is not None else max(versions(model_dir), default=0) + 1
        target = model_dir / str(number)
        _refuse_existing(target, name)
        try:
            os.rename(tmp, target)  # fails on a non-empty target: never overwrites a version
            return target
        except OSError:
            if version is not None or not target.exists():
                raise
            # Another export took this number between the check and the rename: take the next.


# --- models.config ----------------------------------------------------------------------------


def read_model_config(base_dir: str | os.PathLike):
    """The `ModelServerConfig` in `base_dir/models.config`, or None if there is none."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    path = Path(base_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except text_format.ParseError as err:
        raise ValueError(
            f"{path} is not a valid ModelServerConfig text proto ({err}). Fix it or delete it; "
            "export rewrites it to list every model exported in the directory."
        ) from None
    return config


def exported_models(base_dir: str | os.PathLike) -> list[str]:
    """Names of the models under `base_dir` with at least one complete version."""
    base = Path(base_dir)
    if not base.is_dir():
        return []
    return sorted(
        p.name
        for p in base.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and any((p / str(v) / "saved_model.pb").is_file() for v in versions(p))
    )


def model_config(base_dir: str | os.PathLike, previous=None, root: str | None = None):
    """A `ModelServerConfig` listing every model exported under `base_dir`.

    Entries of `previous` for models still there keep their other fields (version policy,
    labels); entries pointing outside `base_dir` are kept as they are. With `root`, base
    paths are `root/<name>` (the directory as mounted in a container) instead of absolute.
    """
    from tensorflow_serving.config import model_server_config_pb2

    base = Path(base_dir).resolve()
    names = exported_models(base)
    kept = {}
    if previous is not None and previous.WhichOneof("config") == "model_config_list":
        for entry in previous.model_config_list.config:
            inside = Path(entry.base_path).parent == base
            if entry.name in names or (not inside and root is None):
                kept[entry.name] = entry
    config = model_server_config_pb2.ModelServerConfig()
    for name in sorted(set(names) | set(kept)):
        entry = config.model_config_list.config.add()
        if name in kept:
            entry.CopyFrom(kept[name])
        if name in names:
            entry.name = name
            entry.base_path = f"{root.rstrip('/')}/{name}" if root else str(base / name)
            entry.model_platform = "tensorflow"
    return config


def write_model_config(base_dir: str | os.PathLike, previous=None) -> Path:
    """Rewrites `models.config` (absolute paths) and `models.docker.config` atomically."""
    from google.protobuf import text_format

    from zoo.files import write_text

    base = Path(base_dir)
    if previous is None:
        previous = read_model_config(base)
    header = (
        "# ModelServerConfig written by `highway-zoo export`: every model exported in this\n"
        "# directory. Serve with: tensorflow_model_server --model_config_file={path}\n"
    )
    path = base / CONFIG_FILE
    write_text(
        path,
        header.format(path=path.resolve())
        + text_format.MessageToString(model_config(base, previous)),
        overwrite=True,
    )
    docker = base / DOCKER_CONFIG_FILE
    write_text(
        docker,
        header.format(path=f"{DOCKER_MODELS_ROOT}/{DOCKER_CONFIG_FILE}")
        + f"# Base paths as mounted by docker run -v {base.resolve()}:{DOCKER_MODELS_ROOT}\n"
        + text_format.MessageToString(model_config(base, previous, root=DOCKER_MODELS_ROOT)),
        overwrite=True,
    )
    return path

