"""``python -m bench.cel_engines``: see the package docstring and ``--help``."""

import sys

from bench.cel_engines.cli import main

sys.exit(main())
