"""``python -m extender`` is the ``dra-extender`` command."""

import sys

from extender.cli import main

sys.exit(main())
