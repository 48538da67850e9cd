"""``python -m ironaccel`` is the ``ironaccel`` command."""

import sys

from .cli import main

sys.exit(main())
