"""Runs a command against the fake's ASan/UBSan build: ``python tests/fakes/run_sanitized.py pytest tests/fakes``.

What CI runs (tox.ini) so that the fake's own tests, which load it in-process, run under the sanitizers: the
environment is ``fakes.sanitizer_env()``'s (libasan preloaded, IRONACCEL_FAKE_SANITIZE=1, every report fatal,
NVRTC's own folder on LD_LIBRARY_PATH).
"""

import os
import sys

from ironaccel import fakes

env = fakes.sanitizer_env()
if env is None:
    sys.exit("run_sanitized: the compiler has no libasan (apt-get install gcc)")
os.execvpe(sys.argv[1], sys.argv[1:], env)
