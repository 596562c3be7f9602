"""`python -m highway_zoo ...` is `highway-zoo ...`."""

from highway_zoo.cli import run

run()
