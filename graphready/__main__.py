"""`python -m graphready ...` runs the same command line as the `graphready` script."""

import sys

from graphready.cli import main

sys.exit(main())
