"""`zoo.serving.client`'s clients and `highway-zoo predict`, against the exported SavedModel.

No TF Serving binary can be installed here, so the tests stand in for the server: they parse
each request as TF Serving does, call the exported signature, and answer in TF Serving's
formats (REST: row form -> "predictions", a list of objects; columnar form -> "outputs", an
object; one named output -> no names; errors -> {"error": message}. gRPC: PredictResponse).
The clients are also run over a real HTTP server and a real gRPC channel on localhost.
"""

import http.server
import json
import os
import re
import tarfile
import threading
from concurrent import futures
from pathlib import Path

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from test_export import CONV, FC, assert_outputs_match, keras_reference, pixels, small_models

import zoo
from highway_zoo.cli import main
from zoo.class_names import CLASS_NAMES, class_names
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


def printed(out: str) -> list[tuple[str, str, int]]:
    """(source, class name, class id) of each line `highway-zoo predict` printed for a model
    with class names ("cat.jpg: cat (class 3)  top-3: cat 0.930, ...")."""
    found = [re.fullmatch(r"(.+): (.+) \(class (\d+)\)  top-\d+: .+", line)
             for line in out.strip().splitlines()]
    assert all(found), out
    return [(m[1], m[2], int(m[3])) for m in found]


def argmax(serve, image: np.ndarray) -> int:
    """The class `serving_default` gives one image of raw pixel values."""
    return int(np.argmax(serve(pixels=tf.constant(image[None], tf.float32))["probabilities"]))


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
    found = printed("\n".join(lines))
    classes = [class_id for _, _, class_id in found]
    expected = case["expected"]["serving_default"]["class_ids"]
    png_class = argmax(case["loaded"].signatures["serving_default"], png_pixels)
    assert classes == [expected[0], expected[1], *expected, png_class]
    assert [name for _, name, _ in found] == [str(c) for c in classes]  # MNIST's names: digits
    assert lines[2].startswith(f"{tmp_path / 'batch.npy'}[0]: ")
    assert lines[0].count(" 0.") + lines[0].count(" 1.") >= 3  # top-3 probabilities


def test_predict_cli_reports_bad_input(served, tmp_path, capsys):
    model_dir = str(served[FC]["path"])
    np.save(tmp_path / "wrong.npy", np.zeros((32, 32, 3), np.float32))
    assert main(["predict", "--model-dir", model_dir, str(tmp_path / "wrong.npy")]) == 2
    err = capsys.readouterr().err
    assert "has shape (32, 32, 3)" in err and "expects one image of shape (28, 28, 1)" in err
    assert main(["predict", "--model-dir", str(tmp_path), str(tmp_path / "wrong.npy")]) == 2
    assert "No SavedModel" in capsys.readouterr().err


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """A fresh highway_a_cifar10 exported (32x32 RGB in, CIFAR-10's class names), its
    signatures and the names its metadata gives."""
    keras.utils.set_random_seed(0)
    model = zoo.load("highway_a_cifar10")
    path = zoo.export(model, base_dir=tmp_path_factory.mktemp("exported"), warmup=False)
    return {"path": path, "names": model.metadata["class_names"],
            "signatures": tf.saved_model.load(str(path)).signatures}


def pictures(n: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """`n` smooth uint8 pictures, each of its own colours (a random net tells them apart)."""
    rng = np.random.default_rng(seed)
    height, width, channels = shape
    ramp = (np.linspace(0.0, 1.0, width)[None, :, None]
            * np.linspace(0.2, 1.0, height)[:, None, None])
    out = [rng.uniform(0, 255, channels) * ramp + rng.uniform(0, 255, channels) * (1 - ramp)
           for _ in range(n)]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def test_predict_names_the_class_of_jpeg_and_png_pictures(cifar, served, tmp_path, capsys):
    """Pictures as users have them: JPEG (decoded as TensorFlow decodes it), RGBA PNG (alpha
    dropped), greyscale PNG (made RGB); each printed with the metadata's name of its class."""
    rgb = pictures(3, (32, 32, 3))
    files = {"photo.jpg": tf.io.encode_jpeg(rgb[0], quality=90).numpy(),
             "rgba.png": tf.io.encode_png(np.concatenate(
                 [rgb[1], np.full((32, 32, 1), 128, np.uint8)], axis=-1)).numpy(),
             "grey.png": tf.io.encode_png(rgb[2][..., :1]).numpy()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    serve = cifar["signatures"]["serving_default"]
    expected = [argmax(serve, tf.io.decode_jpeg(files["photo.jpg"]).numpy()),
                argmax(serve, rgb[1]), argmax(serve, np.repeat(rgb[2][..., :1], 3, axis=-1))]
    paths = [str(tmp_path / name) for name in files]
    assert main(["predict", "--model-dir", str(cifar["path"]), *paths]) == 0
    out, err = capsys.readouterr()
    assert printed(out) == [(path, cifar["names"][c], c) for path, c in zip(paths, expected)]
    assert err == ""
    assert cifar["names"] == list(CLASS_NAMES["cifar10"])
    # An MNIST net takes an RGB picture as grey: ITU-R 601-2 luma, as Pillow's convert("L").
    colour = pictures(1, (28, 28, 3), seed=1)[0]
    (tmp_path / "colour.png").write_bytes(tf.io.encode_png(colour).numpy())
    assert main(["predict", "--model-dir", str(served[FC]["path"]),
                 str(tmp_path / "colour.png")]) == 0
    luma = np.round(colour.astype(np.float32) @ np.float32([0.299, 0.587, 0.114]))[..., None]
    fc = served[FC]["loaded"].signatures["serving_default"]
    assert printed(capsys.readouterr().out)[0][2] == argmax(fc, luma)


def test_predict_refuses_a_bad_file_in_one_line(cifar, tmp_path, capfd):
    """Truncated, damaged, not a picture, empty, missing: one line naming the file and what
    is wrong, exit status 2; nothing of TensorFlow's or libjpeg's reaches the terminal
    (capfd: the process's own stderr, where libjpeg writes)."""
    rgb = pictures(1, (32, 32, 3))[0]
    jpeg, png = tf.io.encode_jpeg(rgb).numpy(), tf.io.encode_png(rgb).numpy()
    bad = {"cut.jpg": (jpeg[:len(jpeg) // 2], "is a truncated JPEG file"),
           "cut.png": (png[:len(png) // 2], "is a truncated PNG file"),
           "flipped.png": (png[:100] + bytes([png[100] ^ 0xFF]) + png[101:],
                           "is a damaged PNG file"),
           "notes.jpg": (b"a shopping list, not a picture\n", "is not a picture"),
           "empty.png": (b"", "is empty (0 bytes)"),
           "missing.jpg": (None, "No image file at")}
    for name, (data, _) in bad.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
    capfd.readouterr()
    for name, (_, what) in bad.items():
        path = tmp_path / name
        assert main(["predict", "--model-dir", str(cifar["path"]), str(path)]) == 2, name
        out, err = capfd.readouterr()
        assert out == "" and err.count("\n") == 1, (name, err)
        assert err.startswith("highway-zoo predict: error: ") and str(path) in err, err
        assert what in err, err
        for text in ("{{function_node", "[Op:", "Traceback", "JPEG library"):
            assert text not in err, err


def test_a_picture_of_another_size_is_refused_then_resized_when_asked(cifar, tmp_path, capsys):
    wide = pictures(1, (48, 64, 3), seed=2)[0]  # 64x48: width x height
    (tmp_path / "wide.png").write_bytes(tf.io.encode_png(wide).numpy())
    args = ["predict", "--model-dir", str(cifar["path"]), str(tmp_path / "wide.png")]
    assert main(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"{tmp_path / 'wide.png'} is 64x48 pixels; the model takes 32x32" in line
    assert "--resize" in line and "bilinear with antialiasing" in line
    assert main([*args, "--resize"]) == 0
    # tf.image.resize, bilinear with antialiasing, then stored as pixel values are.
    resized = tf.image.resize(wide, (32, 32), method="bilinear", antialias=True).numpy()
    expected = argmax(cifar["signatures"]["serving_default"], np.clip(np.round(resized), 0, 255))
    assert printed(capsys.readouterr().out) == [
        (str(tmp_path / "wide.png"), cifar["names"][expected], expected)]


def test_the_classify_signature_names_serving_defaults_class(cifar):
    """TF Serving's classify outputs: every class's name, best first, with its probability;
    the first is serving_default's argmax, named as the metadata names it."""
    signatures = cifar["signatures"]
    x = tf.constant(pictures(6, (32, 32, 3), seed=3), tf.float32)
    out = signatures["classify"](pixels=x)
    assert out["classes"].dtype == tf.string and out["scores"].dtype == tf.float32
    assert out["classes"].shape == out["scores"].shape == (6, 10)
    probabilities = signatures["serving_default"](pixels=x)["probabilities"].numpy()
    classes = out["classes"].numpy().astype(str)
    assert list(classes[:, 0]) == [cifar["names"][c] for c in probabilities.argmax(axis=-1)]
    assert all(sorted(row) == sorted(cifar["names"]) for row in classes)  # every class, once
    np.testing.assert_allclose(out["scores"], -np.sort(-probabilities, axis=-1), rtol=1e-6)
    by_name = {name: i for i, name in enumerate(cifar["names"])}
    np.testing.assert_allclose(  # each score is its named class's probability
        out["scores"], np.take_along_axis(probabilities, np.vectorize(by_name.get)(classes), -1),
        rtol=1e-6)
    record = json.loads((cifar["path"] / "assets.extra" / "highway_zoo.json").read_text())
    assert record["class_names"] == cifar["names"]


def test_a_net_with_its_own_classes_answers_with_ids_and_says_so(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    model = zoo.load(FC, depth=2, classes=5)  # a user's own 5 classes: names unknown
    assert model.metadata["class_names"] is None
    path = zoo.export(model, base_dir=tmp_path, warmup=False)
    x = pixels(3, seed=4)
    np.save(tmp_path / "x.npy", x)
    assert main(["predict", "--model-dir", str(path), str(tmp_path / "x.npy")]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"note: {path} names no classes") and err.count("\n") == 1
    expected = model.predict(x, verbose=0).argmax(axis=-1)
    found = [re.fullmatch(r".+\]: class (\d) {2}top-3: \d 0\.\d{3}, \d 0\.\d{3}, \d 0\.\d{3}",
                          line) for line in out.strip().splitlines()]
    assert [int(m[1]) for m in found] == list(expected)
    classify = tf.saved_model.load(str(path)).signatures["classify"](pixels=tf.constant(x))
    assert list(classify["classes"].numpy()[:, 0].astype(str)) == [str(c) for c in expected]


# --- the class names ------------------------------------------------------------------------

# The real data beside the checkout (never committed), as tests/test_pretrained.py finds it.
REAL_DATA = Path(os.environ.get("HIGHWAY_ZOO_REAL_DATA",
                                Path(__file__).resolve().parents[2] / "shared" / "data"))
CIFAR10_JPEG = REAL_DATA / "cifar10-jpeg.tar.gz"


def cifar10_test_pictures(per_class: int) -> dict[str, list[tuple[str, bytes]]]:
    """The first `per_class` test JPEGs of each class folder of the real CIFAR-10 copy
    (cifar10-jpeg/test/<class>/NNNN.jpg), by class folder name: {class: [(file, bytes)]}."""
    found: dict[str, list[tuple[str, bytes]]] = {}
    with tarfile.open(CIFAR10_JPEG) as archive:
        for member in archive:
            parts = member.name.split("/")
            if len(parts) > 1 and parts[1] == "train":
                break  # git archive's order: test/ first
            if member.isfile() and len(parts) == 4 and parts[1] == "test":
                files = found.setdefault(parts[2], [])
                if len(files) < per_class:
                    files.append((parts[3], archive.extractfile(member).read()))
    return found


def test_the_class_names_match_the_datasets_own_lists(tmp_path):
    import tensorflow_datasets as tfds

    # Fashion-MNIST: TFDS's builder lists its names in its code (no data needed).
    info = tfds.builder("fashion_mnist", data_dir=str(tmp_path)).info
    assert list(CLASS_NAMES["fashion_mnist"]) == info.features["label"].names
    assert CLASS_NAMES["mnist"] == tuple("0123456789")
    # CIFAR-100's fine_label_names.txt lists its 100 names in alphabetical order.
    fine = CLASS_NAMES["cifar100"]
    assert len(set(fine)) == 100 and list(fine) == sorted(fine)
    assert {"aquarium_fish", "keyboard", "lawn_mower", "willow_tree"} <= set(fine)
    # What a model's metadata says: its dataset's names, none without a top or for ImageNet.
    assert class_names("cifar100", 100) == list(fine)
    assert class_names("imagenet2012", 1000) is None and class_names("cifar10", 5) is None
    assert zoo.load(FC, depth=2).metadata["class_names"] == list(CLASS_NAMES["mnist"])
    assert zoo.load(FC, depth=2, include_top=False).metadata["class_names"] is None


@pytest.mark.skipif(not CIFAR10_JPEG.is_file(), reason=f"no real CIFAR-10 at {CIFAR10_JPEG}")
def test_cifar10s_names_are_its_image_folders_in_label_order():
    """The JPEG copy's class folders, sorted, are CIFAR-10's labels 0-9 (the copy's README,
    checked there against the official per-class counts)."""
    assert tuple(sorted(cifar10_test_pictures(per_class=0))) == CLASS_NAMES["cifar10"]


@pytest.mark.slow
@pytest.mark.skipif(not CIFAR10_JPEG.is_file(), reason=f"no real CIFAR-10 at {CIFAR10_JPEG}")
def test_the_shipped_highway_b_names_real_cifar10_jpegs(tmp_path, capsys):
    """A new user's path: `export highway_b_cifar10 --weights default`, then `predict` on
    CIFAR-10's own JPEGs (two per class), which it names; most of them rightly."""
    files, truth = [], []
    for label, pictures_ in cifar10_test_pictures(per_class=2).items():
        for name, data in pictures_:
            files.append(tmp_path / f"{label}-{name}")
            files[-1].write_bytes(data)
            truth.append(label)
    base = tmp_path / "exported"
    assert main(["export", "highway_b_cifar10", "--weights", "default", "--base-dir",
                 str(base), "--no-warmup"]) == 0
    capsys.readouterr()
    model_dir = base / "highway_b_cifar10" / "1"
    assert main(["predict", "--model-dir", str(model_dir), *map(str, files)]) == 0
    found = printed(capsys.readouterr().out)
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    names = CLASS_NAMES["cifar10"]
    for (source, name, class_id), path in zip(found, files):
        expected = argmax(serve, tf.io.decode_jpeg(path.read_bytes()).numpy())
        assert (source, name, class_id) == (str(path), names[expected], expected)
    right = sum(name == label for (_, name, _), label in zip(found, truth))
    assert right >= 12, f"{right}/20 named rightly; the weights score 0.79 on the test split"
