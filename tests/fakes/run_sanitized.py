"""Runs a command against the fake's ASan/UBSan build: ``python tests/fakes/run_sanitized.py pytest tests/fakes``.

What CI runs (tox.ini) so that the fake's own tests, which load it in-process, run under the sanitizers: the
environment is fakeprobe.sanitizer_env()'s (libasan preloaded, IRONACCEL_FAKE_SANITIZE=1, every report
fatal), plus NVRTC's own folder on LD_LIBRARY_PATH: under ASan's dlopen interceptor NVRTC no longer finds
libnvrtc-builtins beside itself through its $ORIGIN run path.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeprobe import sanitizer_env  # noqa: E402

from ironaccel import fakes  # noqa: E402

env = sanitizer_env()
if env is None:
    sys.exit("run_sanitized: the compiler has no libasan (apt-get install gcc)")
nvrtc = fakes._real_toolchain().get("nvrtc")
if nvrtc:
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(Path(nvrtc).parent), env.get("LD_LIBRARY_PATH")) if p)
os.execvpe(sys.argv[1], sys.argv[1:], env)
