"""Where ironaccel keeps what it builds and provisions (built fakes, the compiled hot path, NVRTC's
compiled kernels, SwiftShader): one folder, $IRONACCEL_CACHE or ~/.cache/ironaccel.

A module of its own, importing nothing of ironaccel, so the lowest layers (``cbuild``, a backend's
compile cache) can use it without importing the target registry above them."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where provisioned drivers and built fakes live: $IRONACCEL_CACHE or ~/.cache/ironaccel."""
    return Path(os.environ.get("IRONACCEL_CACHE") or Path.home() / ".cache" / "ironaccel")
