"""Writes fakes/cuda/PTX_COVERAGE.md: which PTX instructions, types and modifiers the fake implements.

The table comes from the decoder's own tables (ironaccel_fake_ptx_coverage() in ptx_decode.c), so it says exactly
what a module load accepts. Run after changing the decoder: python fakes/cuda/gen_coverage.py
(tests/fakes/test_kernels_interpreter.py fails while the committed file is stale).
"""

import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ironaccel import fakes  # noqa: E402

PATH = Path(__file__).with_name("PTX_COVERAGE.md")


def generate() -> str:
    coverage = fakes.load().ironaccel_fake_ptx_coverage
    coverage.restype = ctypes.c_char_p
    return coverage().decode()


if __name__ == "__main__":
    PATH.write_text(generate())
    print(f"wrote {PATH}")
