"""moderngl 5.13's create_context keeps a reference to every GL entry point address its context's ``load``
returns and to every GL extension name: ~900 Python objects (~38 KiB on llvmpipe) per context, never freed.
Prints the Python memory one created-and-released context leaves behind, with glcontext's context given to
moderngl directly and through a wrapper whose ``load`` hands out one int object per address.
Run headless with Mesa: __EGL_VENDOR_LIBRARY_FILENAMES=/usr/share/glvnd/egl_vendor.d/50_mesa.json python3 repro.py"""

import gc
import tracemalloc

import moderngl
from glcontext import egl

ADDRESSES: dict[int, int] = {}


class SharedAddresses:
    def __init__(self, native):
        self.native = native

    def load(self, name):
        address = self.native.load(name)
        return ADDRESSES.setdefault(address, address)

    def __enter__(self):
        return self.native.__enter__()

    def __exit__(self, *exc):
        return self.native.__exit__(*exc)

    def release(self):
        self.native.release()


def context(wrapped: bool) -> moderngl.Context:
    native = egl.create_context(mode="standalone", glversion=430, libgl="libGL.so.1", libegl="libEGL.so.1")
    return moderngl.create_context(require=430, context=SharedAddresses(native) if wrapped else native)


def leaked_per_context(wrapped: bool, n: int = 20) -> float:
    context(wrapped).release()  # what the first context sets up once is not counted
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(n):
        ctx = context(wrapped)
        ctx.release()
        del ctx
    gc.collect()
    return (tracemalloc.get_traced_memory()[0] - before) / n


if __name__ == "__main__":
    tracemalloc.start()
    first = context(False)
    print("GL_RENDERER:", first.info["GL_RENDERER"], "| extensions:", len(first.extensions))
    first.release()
    print(f"moderngl {moderngl.__version__}: {leaked_per_context(False):.0f} bytes of Python objects left per context")
    print(f"with one int per entry point: {leaked_per_context(True):.0f} bytes per context (the extension names)")
