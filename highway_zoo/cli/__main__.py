"""`python -m highway_zoo.cli ...` is `highway-zoo ...`."""

from highway_zoo.cli import run

run()
