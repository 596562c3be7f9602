"""`highway-zoo COMMAND --help` and usage errors answer before TensorFlow is imported: the
parsers import no Keras (main imports TensorFlow after parsing, for the command that runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from highway_zoo.cli import COMMANDS

PROBE = """
import sys
from highway_zoo.cli import main
try:
    main([{command!r}, {flag!r}])
except SystemExit as stop:
    code = stop.code
print("keras" in sys.modules, "tensorflow" in sys.modules, code, file=sys.stderr)
"""


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("flag", ["--help", "--no-such-flag"])
def test_help_and_usage_errors_import_no_keras(command, flag):
    out = subprocess.run([sys.executable, "-c", PROBE.format(command=command, flag=flag)],
                         capture_output=True, text=True, timeout=120)
    keras_loaded, tf_loaded, code = out.stderr.strip().splitlines()[-1].split()
    assert (keras_loaded, tf_loaded) == ("False", "False"), out.stderr
    assert code == ("0" if flag == "--help" else "2")
    if flag == "--help":
        assert f"usage: highway-zoo {command}" in out.stdout


def test_depth_help_counts_the_stem():
    from highway_zoo.cli import command_parser

    text = command_parser("tune").format_help()
    assert "N-1 highway layers" in " ".join(text.split())
