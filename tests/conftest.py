"""Shared test configuration.

Hypothesis profiles, chosen by $HYPOTHESIS_PROFILE (default ``dev``): ``dev``, and ``ci`` — derandomized,
no deadline, no example database. The conformance plugin (ironaccel/pytest_plugin.py) registers the same
two profiles with the same values when it is active; these apply when it is not (``-p no:...``).
"""

import os

from hypothesis import settings

settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
