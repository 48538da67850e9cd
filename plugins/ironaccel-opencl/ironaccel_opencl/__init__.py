"""ironaccel-opencl: an OpenCL backend for ironaccel, shipped as its own distribution.

It registers, by entry point, backend ``opencl`` (``backend.OpenCLBackend``, which also registers the kernel
language ``opencl``) and its drivers (``drivers.drivers``: PoCL and every other OpenCL ICD on the machine),
with its own conformance kernels (``kernels/*.cl``) and expectations (``expectations/``).
"""
