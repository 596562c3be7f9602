"""`python -m highway_zoo ...` is `highway-zoo ...`."""

import sys

from highway_zoo.cli import main

sys.exit(main())
