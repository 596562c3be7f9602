"""`highway-zoo export` and `highway-zoo predict`: TF Serving's layout, and a local check;
`highway-zoo generate`: text from a language model (`model.generate`)."""

from __future__ import annotations

import sys
from pathlib import Path

from highway_zoo.cli.args import DTYPE_POLICIES, add_data_dir, positive


def _export_arguments(p) -> None:
    p.description = (
        "Exports a zoo network as a TensorFlow SavedModel in TF Serving's layout "
        "(BASE_DIR/NAME/VERSION), with signatures serving_default (probabilities, class_ids), "
        "logits, gates and classify (classes: the class names, best first; scores), warm-up "
        "requests and provenance, and rewrites "
        "BASE_DIR/models.config to list every model there. Versions are never overwritten. "
        "A language model (lstm_char_*, --weights RUN_DIR) takes words and returns the next "
        "word's probabilities (docs/guide/export.md). --format tflite or onnx writes one file, "
        "BASE_DIR/NAME/VERSION.tflite or .onnx, instead; --format tflite --quantize int8 a "
        "full-integer one, VERSION.int8.tflite.")
    p.add_argument("name", help="architecture name (highway-zoo list), or a run directory")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--weights", help="a run directory of highway-zoo train, a model "
                         "directory, a .weights.h5 file (with its .sha256), or 'default' for "
                         "the shipped weights")
    weights.add_argument("--random-weights", action="store_true",
                         help="export a freshly initialised network (timing, testing)")
    p.add_argument("--base-dir", default="exported", metavar="DIR",
                   help="model base path (default exported)")
    p.add_argument("--version", type=positive, help="version number (default: the next free one)")
    p.add_argument("--served-name", dest="served_name",
                   help="the model's name in TF Serving (default: NAME)")
    p.add_argument("--no-warmup", action="store_true", help="write no warm-up requests")
    p.add_argument("--max-batch", type=positive, metavar="N",
                   help="the most images one request may hold (default: zoo.export's, 1024); "
                   "a larger request fails with an error saying so")
    p.add_argument("--batching-config", action="store_true",
                   help="also write BASE_DIR/batching.config, TF Serving's batching "
                   "parameters with --max-batch (--enable_batching --batching_parameters_file)")
    p.add_argument("--format", choices=("tf_saved_model", "tflite", "onnx"),
                   default="tf_saved_model",
                   help="tf_saved_model (default); tflite: one file BASE_DIR/NAME/VERSION.tflite "
                   "with the same signatures (run it with zoo.serving.tflite.load); onnx: one "
                   "file BASE_DIR/NAME/VERSION.onnx with the same outputs, for onnxruntime "
                   "(the onnx extra; a language model's takes character ids)")
    p.add_argument("--quantize", choices=("int8",),
                   help="with --format tflite: a full-integer file "
                   "BASE_DIR/NAME/VERSION.int8.tflite (int8 ops, uint8 raw pixels in), "
                   "calibrated on images of the model's training split "
                   "(docs/guide/quantization.md)")
    p.add_argument("--calibration-images", type=positive, metavar="N",
                   help="training images --quantize calibrates on (default 300, drawn with a "
                   "fixed seed)")
    add_data_dir(p)  # the dataset --quantize calibrates on
    p.add_argument("--dtype", choices=DTYPE_POLICIES,
                   help="the Keras dtype policy the exported net computes in (default: the "
                   "one its weights were trained in, as their run records it); tflite and "
                   "onnx take float32")


def _calibration(args):
    """The model's training images for --quantize: a function of the resolved model, so that
    a name, a run directory and a preset all calibrate on their own dataset."""
    if args.quantize is None:
        if args.calibration_images is not None:
            raise ValueError("--calibration-images applies to --quantize int8 only.")
        return None
    from training.data.images import CALIBRATION_IMAGES, representative_sample

    def images(model):
        dataset = model.metadata.get("dataset")
        if dataset is None:
            raise ValueError(f"{model.name} records no dataset to calibrate its int8 TFLite "
                             "file on; export the float file (without --quantize).")
        return representative_sample(dataset, args.calibration_images or CALIBRATION_IMAGES,
                                     args.data_dir)

    return images


def export(args) -> None:
    from zoo.serving.saved_model import export as export_

    path = export_(
        args.name, base_dir=args.base_dir, version=args.version, weights=args.weights,
        random_weights=args.random_weights, name=args.served_name, warmup=not args.no_warmup,
        batching_config=args.batching_config,
        **({} if args.max_batch is None else {"max_batch": args.max_batch}),
        format=args.format, quantize=args.quantize, representative=_calibration(args),
        **({} if args.dtype is None else {"dtype": args.dtype}),
    )
    print(f"exported {args.name} to {path}")
    if args.format == "tf_saved_model":
        print(f"models.config: {Path(args.base_dir).resolve() / 'models.config'}")


def _predict_arguments(p) -> None:
    p.description = (
        "Loads an exported SavedModel with tf.saved_model.load and prints, per image, the "
        "predicted class by name (with its id) and the top probabilities, e.g. "
        "'cat.jpg: cat (class 3)  top-3: cat 0.930, dog 0.051, frog 0.009'; a net without "
        "class names (its own classes=N) prints ids. IMAGE: a picture (JPEG, PNG, GIF, BMP, "
        "WebP; alpha dropped, grey or RGB made what the model takes) of the model's size, or "
        "a .npy holding one image or a batch, of raw pixel values 0-255. For an exported "
        "language model, the arguments are the words of a sentence, and it prints the most "
        "probable next words (at most 5).")
    p.add_argument("--model-dir", required=True, metavar="DIR",
                   help="a version directory, e.g. exported/highway_fc10_mnist/1")
    p.add_argument("images", nargs="+", metavar="IMAGE",
                   help="pictures or .npy files (a language model: WORD ...)")
    p.add_argument("--top", type=positive, default=3,
                   help="how many classes to show (default 3)")
    p.add_argument("--resize", action="store_true",
                   help="resize pictures of another size to the model's: bilinear, "
                   "antialiased (tf.image.resize), the aspect ratio not kept; without it "
                   "they are refused")


def predict(args) -> None:
    from zoo.serving.predict import NextWords
    from zoo.serving.predict import predict as predict_

    results = predict_(args.model_dir, args.images, top=args.top, resize=args.resize)
    if any(not isinstance(r, NextWords) and r.class_names is None for r in results):
        print(f"note: {args.model_dir} names no classes (a net given its own classes=N, or "
              "exported before class names): printing class ids.", file=sys.stderr)
    for result in results:
        if isinstance(result, NextWords):
            top = ", ".join(f"{w}: {p:.3f}" for w, p in result.top)
            print(f"{' '.join(result.context)} -> {top}")
            continue
        if result.class_names is None:
            top = ", ".join(f"{c} {p:.3f}" for c, p in result.top)
            print(f"{result.source}: class {result.class_id}  top-{len(result.top)}: {top}")
            continue
        top = ", ".join(f"{result.class_names[c]} {p:.3f}" for c, p in result.top)
        print(f"{result.source}: {result.class_name} (class {result.class_id})  "
              f"top-{len(result.top)}: {top}")


def _generate_arguments(p) -> None:
    p.description = (
        "Writes text after a prompt with a language model, as keras-hub's CausalLM.generate: "
        "greedy (the most probable word) or top-k sampling, the LSTM states carried from word "
        "to word; the prompt is read as a sentence's start. Prints the prompt and what follows.")
    p.add_argument("name", help="a language model (highway-zoo list 'lstm_char_*'), or a run "
                   "directory of one")
    p.add_argument("prompt", nargs="+", metavar="WORD", help="the words to go on from")
    p.add_argument("--weights", default=None, help="default: the shipped weights of NAME "
                   "(weights=\"default\"); or a run directory")
    p.add_argument("--max-length", type=positive, default=20, metavar="N",
                   help="words in all, the prompt's included (default 20)")
    p.add_argument("--sampler", choices=("greedy", "top_k"), default="greedy")
    p.add_argument("--top-k", type=positive, default=5, metavar="K",
                   help="top_k: draw from the K most probable words (default 5)")
    p.add_argument("--seed", type=int, default=None, help="top_k: the seed (the same seed, "
                   "the same text)")
    p.add_argument("--no-stop", action="store_true",
                   help="go on past the end of a sentence (<eos>) to --max-length")


def generate(args) -> None:
    import zoo

    if Path(args.name).is_dir():
        if args.weights is not None:
            raise ValueError(f"{args.name} is a run directory, which brings its own weights; "
                             "leave --weights out.")
        model = zoo.load(args.name)
    else:
        model = zoo.load(args.name, weights=args.weights or "default")
    print(model.generate(" ".join(args.prompt), args.max_length, sampler=args.sampler,
                         k=args.top_k, seed=args.seed,
                         stop_token=None if args.no_stop else "<eos>"))


COMMANDS = {"export": (_export_arguments, export), "predict": (_predict_arguments, predict),
            "generate": (_generate_arguments, generate)}
