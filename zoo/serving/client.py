"""Clients for a TF Serving model server: requests from NumPy images, responses back to arrays.

    >>> from zoo.serving import client
    >>> images = np.zeros((2, 28, 28, 1), np.float32)            # raw pixels 0-255
    >>> out = client.predict_rest("http://localhost:8501", "highway_fc10_mnist", images)
    >>> out["class_ids"], out["probabilities"].shape
    >>> out = client.predict_grpc("localhost:8500", "highway_fc10_mnist", images,
    ...                            signature_name="gates")

REST (TF Serving's `/v1/models/<name>[/versions/<v>]:predict`): `rest_request` builds the body in
the row form (`"instances"`, one object per image, answered with `"predictions"`: one object
per image) or the columnar form (`"inputs"`, answered with `"outputs"`: one list per output);
`parse_rest_response` turns either answer into `{output name: array}`. gRPC
(`PredictionService/Predict`): `grpc_request` builds a `PredictRequest`,
`parse_grpc_response` reads a `PredictResponse`. Needs `tensorflow-serving-api` (and TensorFlow
for its tensor protos), not this project's layers: the exported SavedModel holds the graph.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

INPUT_NAME = "pixels"
DEFAULT_SIGNATURE = "serving_default"
FORMS = ("instances", "inputs")


class ServingError(RuntimeError):
    """The model server answered with an error (its message is kept)."""


def _batch(images) -> np.ndarray:
    images = np.asarray(images, dtype=np.float32)
    if images.ndim < 2:
        raise ValueError(
            "images must be a batch [N, height, width, channels] of raw pixel values. "
            f"Received an array of shape {images.shape}"
        )
    return images


def rest_url(
    server: str, model_name: str, version: int | None = None, verb: str = "predict"
) -> str:
    """`<server>/v1/models/<name>[/versions/<version>]:<verb>`, server e.g. http://localhost:8501."""
    versioned = "" if version is None else f"/versions/{int(version)}"
    return f"{server.rstrip('/')}/v1/models/{model_name}{versioned}:{verb}"


def rest_request(
    images,
    signature_name: str = DEFAULT_SIGNATURE,
    form: str = "instances",
    input_name: str = INPUT_NAME,
) -> dict[str, Any]:
    """The JSON body (a dict; `json.dumps` it) of a REST predict request for `images`.

    Args:
        images: a batch `[N, *input_shape]` of raw pixel values.
        signature_name: `serving_default`, `logits` or `gates`.
        form: `"instances"` (row form: one `{input_name: image}` per image) or `"inputs"`
            (columnar form: `{input_name: batch}`).
    """
    images = _batch(images)
    if form == "instances":
        payload: Any = [{input_name: image.tolist()} for image in images]
    elif form == "inputs":
        payload = {input_name: images.tolist()}
    else:
        raise ValueError(f"form must be one of {FORMS}. Received: form={form!r}")
    return {"signature_name": signature_name, form: payload}


def _array(values) -> np.ndarray:
    array = np.asarray(values)
    return array.astype(np.float32) if array.dtype == np.float64 else array


def parse_rest_response(
    body: Mapping[str, Any] | str | bytes, output_name: str = "output"
) -> dict[str, np.ndarray]:
    """`{output name: array}` from a REST predict response (either form).

    Floats come back as float32, integers as int64. When the signature has a single output,
    TF Serving leaves its name out of the answer; it is then returned under `output_name`.

    Raises:
        ServingError: the body is TF Serving's `{"error": message}`.
    """
    if isinstance(body, str | bytes):
        body = json.loads(body)
    if "error" in body:
        raise ServingError(str(body["error"]))
    if "predictions" in body:
        rows = body["predictions"]
        if rows and isinstance(rows[0], Mapping):
            return {key: _array([row[key] for row in rows]) for key in rows[0]}
        return {output_name: _array(rows)}
    if "outputs" in body:
        outputs = body["outputs"]
        if isinstance(outputs, Mapping):
            return {key: _array(value) for key, value in outputs.items()}
        return {output_name: _array(outputs)}
    raise ValueError(
        "Not a TF Serving predict response: expected a JSON object with 'predictions', "
        f"'outputs' or 'error'. Received keys: {sorted(body)}"
    )


def predict_rest(
    server: str,
    model_name: str,
    images,
    signature_name: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    form: str = "instances",
    timeout: float = 30.0,
) -> dict[str, np.ndarray]:
    """POSTs a predict request to the REST API at `server` (e.g. `http://localhost:8501`)."""
    url = rest_url(server, model_name, version)
    data = json.dumps(rest_request(images, signature_name, form)).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return parse_rest_response(response.read())
    except urllib.error.HTTPError as err:
        body = err.read()
        try:
            message = json.loads(body).get("error", body.decode(errors="replace"))
        except ValueError:
            message = body.decode(errors="replace")
        raise ServingError(f"{url} answered HTTP {err.code}: {message}") from None


def grpc_request(
    images,
    model_name: str,
    signature_name: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    input_name: str = INPUT_NAME,
):
    """A `tensorflow_serving.apis.predict_pb2.PredictRequest` for `images`."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    request.inputs[input_name].CopyFrom(tf.make_tensor_proto(_batch(images)))
    return request


def parse_grpc_response(
    response, output_names: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """`{output name: array}` from a `PredictResponse` (all outputs, or `output_names`)."""
    import tensorflow as tf

    names = list(output_names) if output_names is not None else sorted(response.outputs)
    return {name: tf.make_ndarray(response.outputs[name]) for name in names}


def predict_grpc(
    target: str,
    model_name: str,
    images,
    signature_name: str = DEFAULT_SIGNATURE,
    version: int | None = None,
    timeout: float = 30.0,
) -> dict[str, np.ndarray]:
    """Calls `PredictionService/Predict` at `target` (e.g. `localhost:8500`)."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    request = grpc_request(images, model_name, signature_name, version)
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as err:
            raise ServingError(f"{target} answered {err.code().name}: {err.details()}") from None
    return parse_grpc_response(response)
