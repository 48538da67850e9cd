"""The mutant catalogue: small, plausible backend mistakes, each visible to a user through a few API calls.

Every mutant replaces one exact piece of text (``old``, which must occur exactly once in ``file``) by ``new``
in a temporary copy of the tree (``run.py``); when the text has moved on, the mutant fails to apply and the
run says so, so the catalogue cannot silently rot. ``target`` is the target the mutant is certified on
(``env``: extra environment for that run, e.g. Vulkan's staging path forced); ``clauses`` the SPEC.md
clauses that should catch it; ``check`` is "suite" (certify the target; killed when a test does not pass)
or "canary" (the plugin's outcome logic: the known-outcome suite in ``canary/`` must be recorded exactly
as ``canary_check.py`` expects). An equivalent mutant stays in the catalogue with ``equivalent`` saying
why in one line; it is reported, never counted.

The mutants are written per area: the backends' in backend_mutants.py, the MemPool's, the fake's and the
plugin's in common_mutants.py; a mutant is a ``mutant.Mutant``.
"""

from __future__ import annotations

from backend_mutants import CUDA, OPENGL, VULKAN, WEBGPU
from common_mutants import FAKE, PLUGIN, POOL
from mutant import Mutant

MUTANTS: list[Mutant] = [*WEBGPU, *VULKAN, *CUDA, *OPENGL, *POOL, *PLUGIN, *FAKE]
