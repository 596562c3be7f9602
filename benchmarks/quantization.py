"""int8 against float for every shipped model: accuracy, file size, CPU latency and the gates.

    python -m benchmarks.quantization [--models highway_fc10_mnist,...] [--calls 200]
        [--gate-images 2000] [--calibration-images 300] [--data-dir DIR]

Each model (default: every one with shipped weights, the presets' weights records) is measured in
its own fresh process, in four forms: the float Keras model (the shipped weights), the Keras
int8 model (`zoo.quantize`: int8 kernels, one scale per output channel, the dense layers'
inputs quantized per row at run time), the float TFLite file and the full-integer TFLite file
(`zoo.export(..., format="tflite", quantize="int8")`, calibrated on `--calibration-images`
training images drawn with a fixed seed). Reported per form: accuracy on the whole test split,
file size (`model.save` `.keras` files for Keras, the `.tflite` files) and the median latency
per image at batch 1 over `--calls` calls after 20 warm-up calls, the four forms timed in turn
over 10 rounds (Keras: the model's call in one `tf.function`; TFLite: the serving_default
signature runner on LiteRT, input already in the file's dtype). Gates: over the first
`--gate-images` test images, each highway layer's T(x) from the float and the int8 Keras
model (`zoo.analysis.GateProbe`): mean T, the fraction of T within 0.01 of 0 or 1, and the
mean |T_int8 - T_float|; and the TFLite files' `gates` signatures (mean T per layer and
image), float against int8.

Latencies are of this machine's state when measured (the JSON records its load average):
taken in turn, a row's forms share that state, so its ratios are sound where its milliseconds
may not be. Prints a table and writes
benchmarks/results/quantization.json and, beside it, quantization.md (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import driver

RESULTS = Path(__file__).resolve().parent / "results" / "quantization.json"
NEAR = 0.01  # "saturated": T within this of 0 or 1
WARMUP_CALLS = 20
ROUNDS = 10  # latency rounds, the four forms timed in turn in each
BATCH = 500  # images per call for the accuracies and gate statistics


def _median_ms(forms: dict, calls: int, rounds: int = ROUNDS) -> dict[str, float]:
    """{form: median ms per call} of `forms` ({form: (call, inputs)}), after WARMUP_CALLS
    calls each, timed in `rounds` rounds that take the forms in turn (calls // rounds calls
    each per round): on a shared machine a burst of other work then slows every form alike,
    so a row's ratios hold even when its milliseconds do not."""
    for call, inputs in forms.values():
        for i in range(WARMUP_CALLS):
            call(inputs[i % len(inputs)])
    times: dict[str, list[float]] = {form: [] for form in forms}
    per_round = max(calls // rounds, 1)
    for _ in range(rounds):
        for form, (call, inputs) in forms.items():
            for i in range(per_round):
                start = time.perf_counter()
                call(inputs[i % len(inputs)])
                times[form].append(time.perf_counter() - start)
    return {form: round(1000 * statistics.median(t), 4) for form, t in times.items()}


def _keras_forms(model, images, labels):
    """Accuracy, and the model's batch-1 call as a tf.function with its inputs."""
    import numpy as np
    import tensorflow as tf

    probabilities = np.concatenate([model.predict_on_batch(images[i:i + BATCH])
                                    for i in range(0, len(images), BATCH)])
    fn = tf.function(lambda x: model(x, training=False))
    ones = [tf.constant(images[i:i + 1]) for i in range(16)]
    return float(np.mean(probabilities.argmax(-1) == labels)), (lambda x: fn(x).numpy(), ones)


def _gates(model, images):
    """{layer: T as float32 arrays, (n, units...)} over `images`, batch by batch."""
    import numpy as np

    from zoo.analysis.gates import GateProbe, highway_layers

    if not highway_layers(model):  # a plain net: no gates
        return {}
    probe = GateProbe(model)
    parts: dict[str, list] = {}
    for i in range(0, len(images), BATCH):
        for name, t in probe.gates(images[i:i + BATCH], numpy=True).items():
            parts.setdefault(name, []).append(t.astype(np.float32))
    return {name: np.concatenate(ts) for name, ts in parts.items()}


def _gate_summary(float_t: dict, int8_t: dict) -> dict:
    import numpy as np

    def saturated(t):
        return float(np.mean((t <= NEAR) | (t >= 1 - NEAR)))

    all_f = np.concatenate([t.ravel() for t in float_t.values()])
    all_q = np.concatenate([t.ravel() for t in int8_t.values()])
    return {
        "mean_t": [round(float(all_f.mean()), 5), round(float(all_q.mean()), 5)],
        "saturated": [round(saturated(all_f), 5), round(saturated(all_q), 5)],
        "mean_abs_change": round(float(np.mean(np.abs(all_q - all_f))), 5),
        "max_abs_change": round(float(np.max(np.abs(all_q - all_f))), 5),
        "layers": {name: {"mean_t": [round(float(float_t[name].mean()), 5),
                                     round(float(int8_t[name].mean()), 5)],
                          "saturated": [round(saturated(float_t[name]), 5),
                                        round(saturated(int8_t[name]), 5)],
                          "mean_abs_change": round(float(np.mean(
                              np.abs(int8_t[name] - float_t[name]))), 5)}
                   for name in float_t},
    }


def _tflite_forms(path, images, labels, gate_images):
    """Accuracy, the batch-1 call with its inputs, and the `gates` signature's T."""
    import numpy as np

    from zoo.serving import tflite

    lite = tflite.load(path)
    probabilities = np.concatenate([lite(images[i:i + BATCH])["probabilities"]
                                    for i in range(0, len(images), BATCH)])
    gates = None
    if "gates" in lite.signatures:
        out = [lite(gate_images[i:i + BATCH], signature="gates")
               for i in range(0, len(gate_images), BATCH)]
        gates = {name: np.concatenate([o[name] for o in out]) for name in out[0]}
    # Batch 1 on the raw runner, the input already in the file's dtype (uint8 for int8).
    details = lite._input_details["serving_default"]
    input_name = lite._inputs["serving_default"][0]
    runner = lite._runners["serving_default"]
    ones = [images[i:i + 1].astype(details["dtype"]) for i in range(16)]
    return (float(np.mean(probabilities.argmax(-1) == labels)),
            (lambda x: runner(**{input_name: x}), ones), gates)


def measure(name: str, calls: int, gate_images: int, calibration_images: int,
            data_dir: str | None = None) -> dict:
    """Runs in the child process: one shipped model in its four forms."""
    import keras
    import numpy as np
    import tensorflow as tf

    import zoo
    from training.data import load_dataset, representative_sample

    tf.get_logger().setLevel("ERROR")
    record = zoo.describe(name)
    dataset = load_dataset(record["dataset"], data_dir)
    images = dataset.test.images.astype(np.float32)
    labels = dataset.test.labels
    gate_x = images[:gate_images]
    out = {"model": name, "dataset": record["dataset"], "test_images": len(labels),
           "data_source": dataset.source, "params": record["params"]}
    with tempfile.TemporaryDirectory(prefix="bench-quantization-") as tmp:
        tmp = Path(tmp)
        model = zoo.load(name, weights="default")
        float_acc, float_call = _keras_forms(model, images, labels)
        float_t = _gates(model, gate_x)
        model.save(tmp / "float.keras")
        start = time.perf_counter()
        float_tflite = zoo.export(model, base_dir=tmp, format="tflite")
        float_convert_s = time.perf_counter() - start
        start = time.perf_counter()
        sample = representative_sample(record["dataset"], calibration_images, data_dir)
        int8_tflite = zoo.export(model, base_dir=tmp, format="tflite", quantize="int8",
                                 representative=sample)
        int8_convert_s = time.perf_counter() - start
        int8_model = zoo.load(name, weights="default")  # the float one stays, for timing
        start = time.perf_counter()
        zoo.quantize(int8_model)  # in place: the Keras int8 model
        quantize_s = time.perf_counter() - start
        int8_acc, int8_call = _keras_forms(int8_model, images, labels)
        int8_t = _gates(int8_model, gate_x) if float_t else {}
        int8_model.save(tmp / "int8.keras")
        lite_acc, lite_call, lite_gates = _tflite_forms(float_tflite, images, labels, gate_x)
        lite8_acc, lite8_call, lite8_gates = _tflite_forms(int8_tflite, images, labels, gate_x)
        latency = _median_ms({"keras_float": float_call, "keras_int8": int8_call,
                              "tflite_float": lite_call, "tflite_int8": lite8_call}, calls)
        sizes = {"keras_float": (tmp / "float.keras").stat().st_size,
                 "keras_int8": (tmp / "int8.keras").stat().st_size,
                 "tflite_float": float_tflite.stat().st_size,
                 "tflite_int8": int8_tflite.stat().st_size}
    out.update({
        "accuracy": {"keras_float": float_acc, "keras_int8": int8_acc,
                     "tflite_float": lite_acc, "tflite_int8": lite8_acc},
        "bytes": sizes,
        "latency_b1_median_ms": latency,
        "load_average_1min": round(os.getloadavg()[0], 2),  # as the latencies were taken
        "seconds": {"quantize": round(quantize_s, 2), "tflite_float": round(float_convert_s, 1),
                    "tflite_int8": round(int8_convert_s, 1)},
        "gate_images": len(gate_x),
        "gates_keras": _gate_summary(float_t, int8_t) if float_t else None,
        "gates_tflite": {
            layer: [round(float(lite_gates[layer].mean()), 5),
                    round(float(lite8_gates[layer].mean()), 5)] for layer in lite_gates
        } if lite_gates else None,
        "tensorflow": tf.__version__, "keras": keras.__version__,
    })
    return out


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KB" if n < 1024**2 else f"{n / 1024**2:.2f} MB"


def table(rows: list[dict]) -> str:
    def acc(r, form):
        return f"{100 * r['accuracy'][form]:.2f}"

    def gates(r):
        g = r["gates_keras"]
        if g is None:
            return "–", "–"
        return (f"{g['mean_t'][0]:.3f} → {g['mean_t'][1]:.3f}",
                f"{100 * g['saturated'][0]:.1f} → {100 * g['saturated'][1]:.1f}")

    return driver.table(
        ["model", "test images", "accuracy % float / int8 (Keras)",
         "accuracy % float / int8 (TFLite)", "size float / int8 (Keras)",
         "size float / int8 (TFLite)", "ms/image float / int8 (Keras)",
         "ms/image float / int8 (TFLite)", "mean T float → int8", "% T saturated"],
        ["---", "---:", *["---:"] * 6, "---:", "---:"],
        [[f"`{r['model']}`", f"{r['test_images']:,}",
          f"{acc(r, 'keras_float')} / {acc(r, 'keras_int8')}",
          f"{acc(r, 'tflite_float')} / {acc(r, 'tflite_int8')}",
          f"{_size(r['bytes']['keras_float'])} / {_size(r['bytes']['keras_int8'])}",
          f"{_size(r['bytes']['tflite_float'])} / {_size(r['bytes']['tflite_int8'])}",
          f"{r['latency_b1_median_ms']['keras_float']:.3f} / "
          f"{r['latency_b1_median_ms']['keras_int8']:.3f}",
          f"{r['latency_b1_median_ms']['tflite_float']:.3f} / "
          f"{r['latency_b1_median_ms']['tflite_int8']:.3f}", *gates(r)] for r in rows])


def gates_table(rows: list[dict]) -> str:
    """Does int8 move T? The Keras int8 model's T against float's, element by element, and
    the TFLite files' per-layer means."""
    def cells(r):
        g, lite = r["gates_keras"], r["gates_tflite"]
        if g is None:
            return ["–"] * 6
        shifts = {layer: q - f for layer, (f, q) in lite.items()}
        worst = max(shifts, key=lambda layer: abs(shifts[layer]))
        return [f"{g['mean_t'][0]:.4f} → {g['mean_t'][1]:.4f}",
                f"{100 * g['saturated'][0]:.2f} → {100 * g['saturated'][1]:.2f}",
                f"{g['mean_abs_change']:.4f}", f"{g['max_abs_change']:.3f}",
                f"{sum(abs(v) for v in shifts.values()) / len(shifts):.4f}",
                f"{shifts[worst]:+.3f} (`{worst}`)"]

    return driver.table(
        ["model", "layers with a T", "mean T (Keras float → int8)",
         f"% T within {NEAR} of 0 or 1", "mean abs ΔT", "max abs ΔT",
         "TFLite: mean abs Δ(layer's mean T)", "TFLite: largest Δ(layer's mean T)"],
        ["---", "---:", *["---:"] * 6],
        [[f"`{r['model']}`", len(r["gates_keras"]["layers"]) if r["gates_keras"] else 0,
          *cells(r)] for r in rows])


def markdown(rows: list[dict]) -> str:
    return table(rows) + "\n\n" + gates_table(rows) + "\n"


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.quantization", __doc__, RESULTS)
    p.add_argument("--models", help="comma-separated names (default: every shipped model)")
    p.add_argument("--calls", type=int, default=200, help="timed batch-1 calls per form")
    p.add_argument("--gate-images", type=int, default=2000,
                   help="test images the gate statistics are taken on")
    p.add_argument("--calibration-images", type=int, default=300,
                   help="training images the int8 TFLite file is calibrated on")
    p.add_argument("--data-dir", help="where the datasets are (training.data.load_dataset)")
    p.add_argument("--resume", action="store_true",
                   help="keep the models already in --out (an interrupted run: the results are "
                   "written after each model) and measure the others")
    return p


def run(args: argparse.Namespace) -> int:
    from zoo import pretrained

    names = [n for n in (args.models or ",".join(pretrained.index())).split(",") if n]
    load_before = os.getloadavg()[0]

    def one(name: str) -> dict:
        return driver.run_child("benchmarks.quantization", {
            "name": name, "calls": args.calls, "gate_images": args.gate_images,
            "calibration_images": args.calibration_images, "data_dir": args.data_dir})

    rows: list[dict] = []
    if args.resume and Path(args.out).is_file():
        done = {r["model"]: r for r in json.loads(Path(args.out).read_text())["results"]}
        rows = [done[name] for name in names if name in done]
    todo = [name for name in names if name not in {r["model"] for r in rows}]

    def write(complete: bool) -> str:
        text = markdown(rows)
        summary = {
            "note": "Latencies: median per image at batch 1, the four forms timed in turn "
                    "over 10 rounds; load_average_1min is the machine's before and after.",
            "complete": complete, "models": names,
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "calls": args.calls, "gate_images": args.gate_images,
            "calibration_images": args.calibration_images, "near": NEAR, "results": rows,
        }
        driver.write_results(args.out, summary)
        path = Path(args.out).with_suffix(".md")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # never half a table
        return text

    def each(name: str) -> dict:
        row = one(name)
        rows.append(row)
        write(complete=False)  # a model at a time: minutes each on a shared machine
        return row

    driver.interleaved(todo, 1, each, describe=lambda name, row: (
        f"{name}: accuracy {row['accuracy']}, latency {row['latency_b1_median_ms']}"))
    rows.sort(key=lambda r: names.index(r["model"]))
    text = write(complete=True)
    print()
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
