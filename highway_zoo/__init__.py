"""highway-zoo: Highway Networks for Keras 3, as a model zoo.

The distribution installs the design's importable packages `layers`, `zoo` and `training`, and
this one, named after the distribution, which holds the command line (`highway_zoo.cli`:
`highway-zoo ...` or `python -m highway_zoo ...`). The benchmarks are not installed: they live
in the repository's `benchmarks/` folder (`highway-zoo bench` runs them from a clone).
Importing it imports neither Keras nor TensorFlow.
"""

__version__ = "0.2.0"
