"""``python -m ironaccel`` is the ``ironaccel`` command."""

import sys

from .cts.cli import main

sys.exit(main())
