"""The Keras backends in the benchmarks: which are installed, the `--backends` option, and each
framework's own reference rates (a matmul, a 3x3 convolution) that training speed is compared
with, so that a backend is measured against what its own kernels can do on this machine."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

KERAS_BACKENDS = ("tensorflow", "jax", "torch")
# The 3x3 convolution every conv row is compared with: (batch, height, width, channels in)
# -> channels out, "same" padding. On a GPU a call of that size (7.4 GFLOP) takes a fraction of
# a millisecond, launch and all, and leaves the chip idle; the GPU's reference is 16x larger
# (a ResNet stage-2 sized map at batch 128, 118 GFLOP).
REFERENCE_CONV = (32, 28, 28, 128, 128)
REFERENCE_CONV_ACCELERATOR = (128, 56, 56, 128, 128)


def installed(backend: str) -> bool:
    """Whether a Keras backend's framework is installed (JAX and PyTorch: the backends extra)."""
    return importlib.util.find_spec(backend) is not None


def parse(text: str) -> list[str]:
    """`--backends tensorflow,jax,torch`: known and installed, or one line saying what to do."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in KERAS_BACKENDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown backend(s) {unknown}; choose from {', '.join(KERAS_BACKENDS)}")
    missing = [n for n in names if not installed(n)]
    if missing:
        raise argparse.ArgumentTypeError(
            f"backend(s) {missing} not installed: pip install -e '.[backends]'")
    return names


def add_option(p: argparse.ArgumentParser, default: list[str] | None = None) -> None:
    default = default or [b for b in KERAS_BACKENDS if installed(b)]
    p.add_argument("--backends", type=parse, default=default,
                   help=f"Keras backends to run, comma-separated (default {','.join(default)})")


def accelerator(framework: str) -> str | None:
    """The GPU `framework` computes on by default here, by name, or None on a CPU. Keras
    places its variables and steps there on that backend without being asked."""
    if framework == "jax":
        import jax

        device = jax.devices()[0]
        return None if device.platform == "cpu" else device.device_kind
    if framework == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    if framework == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return gpus[0].name if gpus else None
    return None


def float32_precision(framework: str) -> dict:
    """The settings that decide how a float32 matmul or convolution is computed on a GPU
    (TF32 or full float32): reported beside every GPU rate, since they change it several
    times over. Empty on a CPU."""
    if accelerator(framework) is None:
        return {}
    if framework == "jax":
        import jax

        # None is XLA's default precision, which computes float32 dots and convolutions in
        # TF32 on GPUs that have it (JAX's documentation, `jax.default_matmul_precision`).
        return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}
    if framework == "torch":
        import torch

        return {"torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    return {}


def device_peak_mb(framework: str) -> float | None:
    """Peak memory the framework allocated on its GPU in this process, MB (None on a CPU)."""
    if accelerator(framework) is None:
        return None
    if framework == "torch":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    if framework == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else peak / 2**20
    return None


def _median_rate(call: Callable[[], object], flops: float, repeats: int) -> float:
    """GFLOP/s of `call` (which waits for its result): median of `repeats` timed calls after
    3 warm-up calls."""
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return flops / statistics.median(times) / 1e9


def matmul_call(framework: str, a, b) -> Callable[[], object]:
    """A call computing `a @ b` in `framework` (numpy, tensorflow, jax or torch), compiled
    where the framework compiles, that waits for its result."""
    if framework == "numpy":
        return lambda: a @ b
    if framework == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        ta, tb = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
        return _waiting(torch, lambda: ta @ tb)
    if framework == "jax":
        import jax

        ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
        matmul = jax.jit(jax.numpy.matmul)
        return lambda: matmul(ja, jb).block_until_ready()
    if framework == "tensorflow":
        import tensorflow as tf

        ta, tb = tf.constant(a), tf.constant(b)
        matmul = tf.function(tf.matmul)
        return lambda: matmul(ta, tb).numpy()
    raise ValueError(f"no matmul for framework {framework!r}")


def conv_call(framework: str, x, w) -> Callable[[], object]:
    """A call computing the 3x3 "same" convolution of NHWC `x` with HWIO `w` in `framework`
    (tensorflow: `tf.nn.conv2d` in a `tf.function`; jax: `lax.conv_general_dilated`,
    jitted, NHWC; torch: `torch.nn.functional.conv2d` on NCHW, PyTorch's own layout, its
    result NCHW), which waits for its result."""
    if framework == "tensorflow":
        import tensorflow as tf

        tx, tw = tf.constant(x), tf.constant(w)
        conv = tf.function(lambda x, w: tf.nn.conv2d(x, w, strides=1, padding="SAME"))
        return lambda: conv(tx, tw).numpy()
    if framework == "jax":
        import jax

        jx, jw = jax.numpy.asarray(x), jax.numpy.asarray(w)
        conv = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return lambda: conv(jx, jw).block_until_ready()
    if framework == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(device)
        tw = torch.from_numpy(w.transpose(3, 2, 0, 1).copy()).to(device)

        def call():
            with torch.no_grad():
                return torch.nn.functional.conv2d(tx, tw, padding=1)
        return _waiting(torch, call)
    raise ValueError(f"no convolution for framework {framework!r}")


def _waiting(torch, call: Callable[[], object]) -> Callable[[], object]:
    """`call`, made to wait for its result on a GPU (CUDA kernels run asynchronously)."""
    if not torch.cuda.is_available():
        return call

    def synchronised():
        out = call()
        torch.cuda.synchronize()
        return out
    return synchronised


def matmul_gflops(framework: str, batch: int, width: int, repeats: int = 20) -> float:
    """GFLOP/s of (batch, width) @ (width, 2 width), a highway layer's fused matmul, in
    `framework`."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((width, 2 * width)).astype(np.float32)
    return _median_rate(matmul_call(framework, a, b), 2 * batch * width * 2 * width, repeats)


def reference_conv(framework: str) -> tuple[int, ...]:
    """The reference convolution's shape for where `framework` computes (CPU or GPU)."""
    return REFERENCE_CONV if accelerator(framework) is None else REFERENCE_CONV_ACCELERATOR


def conv_gflops(framework: str, shape: tuple[int, ...] | None = None,
                repeats: int = 10) -> float:
    """GFLOP/s of the reference 3x3 convolution (default: `reference_conv(framework)`) in
    `framework` (`conv_call`)."""
    import numpy as np

    shape = shape or reference_conv(framework)
    batch, height, width, c_in, c_out = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, height, width, c_in)).astype(np.float32)
    w = rng.standard_normal((3, 3, c_in, c_out)).astype(np.float32)
    flops = 2 * 3 * 3 * c_in * c_out * height * width * batch
    return _median_rate(conv_call(framework, x, w), flops, repeats)
