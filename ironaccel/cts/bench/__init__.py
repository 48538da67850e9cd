"""``ironaccel bench``: host-side overhead of ironaccel against the raw driver calls and peer libraries.

    ironaccel bench --backend cuda/nvidia --peers --out benchmarks/results  # on a GPU
    ironaccel bench --backend webgpu/lavapipe --peers --quick                # simulated: labelled so

Every operation is timed for ironaccel, for the raw driver calls that do the same thing (the *floor*:
cuda.bindings, the ``vulkan`` package, wgpu-py or moderngl, on the same device, reached through the public
``native`` handles), on CUDA for the same driver calls made from C (the *C floor*, ``cfloor.c``, built
with the system C compiler and timed in the same rounds through a pipe) and, with ``--peers``, for each
peer library that can be imported (cuda.core, CuPy, PyTorch). How, so that the figures mean something:

* A warm-up first: each implementation runs until its batch size is calibrated to ``sample_ms``.
* Samples are paired and alternate between implementations, round by round; the reported ratio is the
  median of the per-round ratios with a bootstrap interval (``stats``).
* Copies are timed to completion (the copy, then a stream synchronize): that is what a bandwidth means,
  and it is the only definition under which a pinned copy (whose source must not change until the copy is
  done) compares with a pageable one. Copies up to ``CALL_ONLY_BYTES`` are also timed as the call alone
  ("call only": until the host array may be reused, with the synchronize between calls left out): that is
  their host-side overhead. Allocation and launch figures are host time only.
* Results on a simulated device (the fake libcuda, lavapipe, SwiftShader, the in-memory test device) say
  SIMULATED in every output: they measure the Python layer over a CPU driver, never a GPU.

Outputs, in ``--out`` (default: a new scratch folder; ``--quick`` never writes into benchmarks/results): ``bench-<backend>-<driver>.json`` (every sample), ``.md`` (the table) and a plot
(``.png`` with matplotlib, else an ``.svg`` written here).

Modules: ``cases`` (what is timed, the goals), ``stats`` (timing and statistics), ``kernels`` (the
launch rows' kernels), ``ours`` (ironaccel's side), ``floor_cuda`` / ``floor_vulkan`` /
``floor_webgpu`` / ``floor_opengl`` (the raw floors), ``cfloor`` (the C floor), ``peers``, ``report`` (the
outputs), ``runner`` (a run and the command's options), ``gate`` (the perf gate: ``--check BASELINE``, a
hot path's ratio to its floor against the committed baseline's; ``--write-baseline``).
"""

from .runner import HELP, SCHEMA, add_arguments, command, main, run

__all__ = ["HELP", "SCHEMA", "add_arguments", "command", "main", "run"]
