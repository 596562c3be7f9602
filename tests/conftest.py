"""Shared test set-up: quiet TensorFlow, the TensorFlow backend, no network, no home writes."""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Never let a test reach TFDS's download servers (they retry for minutes offline).
os.environ.setdefault("TFDS_DATA_DIR", "/nonexistent-tfds-data-dir-for-tests")
# Pretrained weights are fetched into the Keras cache: keep the tests' cache private.
os.environ["KERAS_HOME"] = tempfile.mkdtemp(prefix="highway-zoo-keras-home-")
