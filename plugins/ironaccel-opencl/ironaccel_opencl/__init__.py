"""ironaccel-opencl: an OpenCL backend for ironaccel, shipped as its own distribution.

It registers, by entry point, backend ``opencl`` (``backend.OpenCLBackend``; importing it registers the kernel
language ``opencl``, from ``module``) and its drivers (``drivers.drivers``: PoCL and every other OpenCL ICD on
the machine), with its own conformance kernels (``kernels/*.cl``) and expectations (``expectations/``).
"""
