"""`python -m cli ...` is `highway-zoo ...`."""

import sys

from cli import main

sys.exit(main())
