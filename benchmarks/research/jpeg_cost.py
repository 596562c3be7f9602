"""What the JPEG copy of CIFAR-10 costs: the same net trained on the copy re-encoded harder.

    python -m benchmarks.research.jpeg_cost --data-dir DIR --out DIR \\
        [--qualities 50,30] [--seeds 0,1] [--architecture highway_a_cifar10] \\
        [--epochs 15] [--dtype mixed_bfloat16]

No lossless CIFAR-10 is reachable here, so the cost of the JPEG copy (quality about 75,
30.5 dB PSNR against the original pixels: `../shared/data/README.md`) is read off a slope.
Every training and test image of the copy is encoded again with Pillow at each quality (4:2:0
chroma, as the copy); the net is trained on each version as on the copy (`training.train`,
recipe `cosine_cifar`, one run directory per quality and seed under `--out`, each resumable),
and its test accuracy is set against the mean squared error the version adds to the copy.
JPEG's errors at different qualities are nearly independent, so a version's error against the
original pixels is about the copy's (58.0 = 255**2 / 10**3.05) plus the error it adds; a line
through the points, extended to zero error, estimates the net's accuracy on lossless images.
It is an extrapolation along one line: the page says how well the points sit on it.

Writes `results.json` (each run's accuracy, each version's added error, the line and the
estimate) under `--out`.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np

# The copy's error against the original CIFAR-10 pixels (../shared/data/README.md: 30.5 dB).
COPY_MSE = 255.0**2 / 10 ** (30.5 / 10)


def reencode(images: np.ndarray, quality: int) -> np.ndarray:
    """Each uint8 RGB image (n, h, w, 3) saved as a JPEG of `quality` and decoded again."""
    from PIL import Image

    out = np.empty_like(images)
    for i, image in enumerate(images):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality, subsampling=2)
        out[i] = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    return out


def added_mse(before: np.ndarray, after: np.ndarray) -> float:
    """Mean squared error per pixel and channel, in 0-255 units."""
    return float(np.mean((before.astype(np.float64) - after.astype(np.float64)) ** 2))


def extrapolate(mse: list[float], accuracy: list[float]) -> dict[str, float]:
    """The least-squares line accuracy = a + b * (COPY_MSE + added) and its value at zero
    error, with the points' root-mean-square distance from the line."""
    total = COPY_MSE + np.asarray(mse, np.float64)
    slope, intercept = np.polyfit(total, np.asarray(accuracy, np.float64), 1)
    residual = np.asarray(accuracy) - (intercept + slope * total)
    return {"slope_per_mse": float(slope), "at_zero_error": float(intercept),
            "at_the_copy": float(intercept + slope * COPY_MSE),
            "cost_of_the_copy": float(-slope * COPY_MSE),
            "rms_residual": float(np.sqrt(np.mean(residual**2)))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="CIFAR-10 as prepare-images wrote it")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--qualities", default="50,30")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--architecture", default="highway_a_cifar10")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--dtype", default="mixed_bfloat16")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="the net's dropout (Highway A underfits with the released 0.2)")
    args = parser.parse_args(argv)
    qualities = [int(q) for q in args.qualities.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]

    from training.data import Dataset, Examples, load_dataset
    from training.data.images import published_source
    from training.trainer import train

    copy = load_dataset("cifar10", args.data_dir, fallback=False)
    versions = {"copy": (copy, 0.0)}
    for quality in qualities:
        train_images = reencode(copy.train.images, quality)
        test_images = reencode(copy.test.images, quality)
        mse = added_mse(np.concatenate([copy.train.images, copy.test.images]),
                        np.concatenate([train_images, test_images]))
        data = Dataset(
            name="cifar10", train=Examples(train_images, copy.train.labels),
            test=Examples(test_images, copy.test.labels), num_classes=10,
            image_shape=copy.image_shape, num_train=copy.num_train, num_test=copy.num_test,
            source=f"{published_source(copy.source)}, encoded again as JPEG quality {quality}")
        versions[f"q{quality}"] = (data, mse)
        print(f"quality {quality}: adds MSE {mse:.1f} to the copy's {COPY_MSE:.1f}", flush=True)

    runs = []
    for name, (data, mse) in versions.items():
        for seed in seeds:
            metrics = train(args.architecture, dataset=data, recipe="cosine_cifar",
                            epochs=args.epochs, seed=seed, out=args.out / f"{name}_seed{seed}",
                            dtype=args.dtype, dropout=args.dropout, verbose=2)
            runs.append({"version": name, "added_mse": mse, "seed": seed,
                         "test_accuracy": metrics["test_accuracy"]})
            print(json.dumps(runs[-1]), flush=True)
    by_version = {}
    for run in runs:
        by_version.setdefault(run["version"], []).append(run)
    mse = [group[0]["added_mse"] for group in by_version.values()]
    accuracy = [float(np.mean([r["test_accuracy"] for r in g])) for g in by_version.values()]
    result = {"architecture": args.architecture, "epochs": args.epochs, "dtype": args.dtype,
              "dropout": args.dropout, "recipe": "cosine_cifar", "copy_mse": COPY_MSE,
              "runs": runs, "line": extrapolate(mse, accuracy)}
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["line"], indent=1))


if __name__ == "__main__":
    main()
