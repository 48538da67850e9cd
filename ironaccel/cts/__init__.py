"""ironaccel.cts: the certification platform (``pip install 'ironaccel[cts]'``), the second wing of ironaccel.

The library (``ironaccel``: api, errors, pool, backends, the compiled hot path) depends on numpy alone and
never imports this package; this package proves its backends: the conformance suite's pytest plugin, the
targets and their drivers, ``ironaccel certify`` and its runners (local, Docker, Ray farm), the judge,
results, STATUS.md, submissions, other projects' suites (clients) and the benchmarks (bench).
"""
