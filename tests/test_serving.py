"""`zoo.serving.client`'s clients and `highway-zoo predict`, against the exported SavedModel.

No TF Serving binary can be installed here, so the tests stand in for the server: they parse
each request as TF Serving does, call the exported signature, and answer in TF Serving's
formats (REST: row form -> "predictions", a list of objects; columnar form -> "outputs", an
object; one named output -> no names; errors -> {"error": message}. gRPC: PredictResponse).
The clients are also run over a real HTTP server and a real gRPC channel on localhost.
"""

import http.server
import json
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from test_export import CONV, FC, assert_outputs_match, keras_reference, pixels, small_models

import zoo
from highway_zoo.cli import main
from zoo.serving import client as serving

SIGNATURES = ("serving_default", "logits", "gates")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Both small models exported, loaded, and what Keras says each signature returns."""
    base = tmp_path_factory.mktemp("exported")
    x = pixels(3, seed=3)
    models = small_models()
    out = {}
    for name, model in models.items():
        path = zoo.export(model, base_dir=base)
        out[name] = {
            "path": path,
            "loaded": tf.saved_model.load(str(path)),
            "x": x,
            "expected": keras_reference(model, x),
        }
    return out


# --- a stand-in for TF Serving's request handling ---------------------------------------------


def _signature(loaded, name):
    return loaded.signatures[name or "serving_default"]


def execute_rest(loaded, body: str) -> tuple[int, str]:
    """(HTTP status, JSON body) for a REST predict request, in TF Serving's formats."""
    request = json.loads(body)
    fn = _signature(loaded, request.get("signature_name"))
    (input_name,) = fn.structured_input_signature[1]
    if "instances" in request:
        rows = request["instances"]
        values = [row[input_name] if isinstance(row, dict) else row for row in rows]
    else:
        columns = request["inputs"]
        values = columns[input_name] if isinstance(columns, dict) else columns
    try:
        outputs = {k: v.numpy() for k, v in fn(**{input_name: tf.constant(values,
                                                                           tf.float32)}).items()}
    except (tf.errors.InvalidArgumentError, ValueError) as err:
        return 400, json.dumps({"error": getattr(err, "message", str(err))})
    if "instances" in request:
        if len(outputs) == 1:
            answer = {"predictions": next(iter(outputs.values())).tolist()}
        else:
            n = len(next(iter(outputs.values())))
            answer = {"predictions": [{k: v[i].tolist() for k, v in outputs.items()}
                                      for i in range(n)]}
    elif len(outputs) == 1:
        answer = {"outputs": next(iter(outputs.values())).tolist()}
    else:
        answer = {"outputs": {k: v.tolist() for k, v in outputs.items()}}
    return 200, json.dumps(answer)


def execute_grpc(loaded, request) -> predict_pb2.PredictResponse:
    fn = _signature(loaded, request.model_spec.signature_name)
    inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    for key, value in fn(**inputs).items():
        response.outputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
    return response


# --- the clients, request by request ----------------------------------------------------------


@pytest.mark.parametrize("form", serving.FORMS)
@pytest.mark.parametrize("signature", SIGNATURES)
def test_rest_round_trip(served, form, signature):
    for case in served.values():
        body = serving.rest_request(case["x"], signature_name=signature, form=form)
        assert body["signature_name"] == signature
        if form == "instances":
            assert len(body["instances"]) == len(case["x"])
            assert list(body["instances"][0]) == ["pixels"]
        else:
            assert list(body["inputs"]) == ["pixels"]
        status, answer = execute_rest(case["loaded"], json.dumps(body))
        assert status == 200
        expected = case["expected"][signature]
        output_name = next(iter(expected)) if len(expected) == 1 else "output"
        assert_outputs_match(serving.parse_rest_response(answer, output_name), expected)


@pytest.mark.parametrize("signature", SIGNATURES)
def test_grpc_round_trip(served, signature):
    for name, case in served.items():
        request = serving.grpc_request(case["x"], name, signature_name=signature, version=1)
        assert request.model_spec.name == name and request.model_spec.version.value == 1
        request = predict_pb2.PredictRequest.FromString(request.SerializeToString())
        response = execute_grpc(case["loaded"], request)
        response = predict_pb2.PredictResponse.FromString(response.SerializeToString())
        assert_outputs_match(serving.parse_grpc_response(response), case["expected"][signature])


def test_rest_errors_and_urls():
    assert serving.rest_url("http://localhost:8501/", FC) == (
        f"http://localhost:8501/v1/models/{FC}:predict")
    assert serving.rest_url("http://h:1", FC, version=3, verb="classify") == (
        f"http://h:1/v1/models/{FC}/versions/3:classify")
    with pytest.raises(serving.ServingError, match="Servable not found"):
        serving.parse_rest_response('{"error": "Servable not found for request: Latest(x)"}')
    with pytest.raises(ValueError, match="form must be one of"):
        serving.rest_request(pixels(1), form="rows")
    with pytest.raises(ValueError, match="'predictions', 'outputs' or 'error'"):
        serving.parse_rest_response({"result": []})


# --- the clients over a real HTTP server and gRPC channel -------------------------------------


@pytest.fixture(scope="module")
def rest_server(served):
    loaded = {name: case["loaded"] for name, case in served.items()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            model = self.path.split("/v1/models/")[1].split(":")[0].split("/")[0]
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            status, answer = execute_rest(loaded[model], body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def grpc_target(served):
    loaded = {name: case["loaded"] for name, case in served.items()}

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the proto's naming)
            try:
                return execute_grpc(loaded[request.model_spec.name], request)
            except tf.errors.InvalidArgumentError as err:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, err.message)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def test_predict_rest_over_http(served, rest_server):
    case = served[CONV]
    out = serving.predict_rest(rest_server, CONV, case["x"])
    assert_outputs_match(out, case["expected"]["serving_default"])
    out = serving.predict_rest(rest_server, CONV, case["x"], signature_name="gates",
                               form="inputs")
    assert_outputs_match(out, case["expected"]["gates"])
    with pytest.raises(serving.ServingError, match=r"(?s)HTTP 400.*\[\?,28,28,1\]"):
        serving.predict_rest(rest_server, CONV, np.zeros((2, 28, 28, 3)))


def test_predict_grpc_over_a_channel(served, grpc_target):
    case = served[FC]
    out = serving.predict_grpc(grpc_target, FC, case["x"], signature_name="gates")
    assert_outputs_match(out, case["expected"]["gates"])
    with pytest.raises(serving.ServingError, match=r"(?s)INVALID_ARGUMENT.*\[\?,28,28,1\]"):
        serving.predict_grpc(grpc_target, FC, np.zeros((2, 28, 28)))


# --- highway-zoo predict ----------------------------------------------------------------------


def test_predict_cli_on_npy_and_png(served, tmp_path, capsys):
    case = served[CONV]
    x = case["x"]
    np.save(tmp_path / "one.npy", x[0])
    np.save(tmp_path / "flat.npy", x[1, ..., 0])  # (28, 28) is fine for one channel
    np.save(tmp_path / "batch.npy", x)
    png_pixels = np.round(x[2]).astype(np.uint8)
    (tmp_path / "digit.png").write_bytes(tf.io.encode_png(png_pixels).numpy())
    paths = [str(tmp_path / f) for f in ("one.npy", "flat.npy", "batch.npy", "digit.png")]
    assert main(["predict", "--model-dir", str(case["path"]), *paths]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6
    classes = [int(line.split("class ")[1].split()[0]) for line in lines]
    expected = case["expected"]["serving_default"]["class_ids"]
    png_class = int(np.argmax(case["loaded"].signatures["serving_default"](
        pixels=tf.constant(png_pixels[None].astype(np.float32)))["probabilities"]))
    assert classes == [expected[0], expected[1], *expected, png_class]
    assert lines[2].startswith(f"{tmp_path / 'batch.npy'}[0]: class")
    assert lines[0].count(": 0.") + lines[0].count(": 1.") >= 3  # top-3 probabilities


def test_predict_cli_reports_bad_input(served, tmp_path, capsys):
    model_dir = str(served[FC]["path"])
    np.save(tmp_path / "wrong.npy", np.zeros((32, 32, 3), np.float32))
    assert main(["predict", "--model-dir", model_dir, str(tmp_path / "wrong.npy")]) == 2
    err = capsys.readouterr().err
    assert "has shape (32, 32, 3)" in err and "expects one image of shape (28, 28, 1)" in err
    (tmp_path / "rgb.png").write_bytes(tf.io.encode_png(np.zeros((28, 28, 3), np.uint8)).numpy())
    assert main(["predict", "--model-dir", model_dir, str(tmp_path / "rgb.png")]) == 2
    assert "3 channel(s); the model expects 28x28x1" in capsys.readouterr().err
    assert main(["predict", "--model-dir", str(tmp_path), str(tmp_path / "wrong.npy")]) == 2
    assert "No SavedModel" in capsys.readouterr().err
