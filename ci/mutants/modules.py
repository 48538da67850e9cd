"""What the generated-mutant engine mutates, in one place: the files of each area and the runs that cover them.

Update here when a module moves.
Paths are globs relative to the repository root; a glob that matches nothing is reported by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: area -> files, for the suite's mutants (killed by the conformance suite alone, issue 23).
SUITE_AREAS: dict[str, tuple[str, ...]] = {
    "cuda": ("ironaccel/backends/cuda/*.py",),
    "vulkan": ("ironaccel/backends/vulkan/*.py",),
    "webgpu": ("ironaccel/backends/webgpu/*.py",),
    "opengl": ("ironaccel/backends/opengl/*.py",),
    "opencl": ("plugins/ironaccel-opencl/ironaccel_opencl/*.py",),
    "core": ("ironaccel/api.py", "ironaccel/backends/__init__.py", "ironaccel/backends/probes.py"),
    "pool": ("ironaccel/pool.py", "ironaccel/hostcopy.py"),
    "fast": ("ironaccel/_fast_c/*.c", "ironaccel/_fast_c/*.inc"),
    "fake": ("fakes/cuda/*.c", "fakes/cuda/*.inc"),
}

#: area -> files, for the platform's mutants (killed by the unit tests, issue 32). After the two-wings move
#: the certification platform's modules (ironaccel/cts/, the two-wings split)
PLATFORM_AREAS: dict[str, tuple[str, ...]] = {
    "results": ("ironaccel/cts/results.py",),
    "judge": ("ironaccel/cts/judge.py",),
    "status": ("ironaccel/cts/status.py",),
    "spec": ("ironaccel/cts/spec.py",),
    "certify": ("ironaccel/cts/certify.py",),
    "submission": ("ironaccel/cts/submission.py",),
    "selection": ("ironaccel/cts/selection.py",),
    "verify": ("ironaccel/cts/certificates.py", "ironaccel/cts/verifier.py", "ironaccel/cts/releases.py",
               "ironaccel/cts/signing.py"),
}

#: The unit test files that judge the platform's mutants (their coverage is recorded per test; a mutant runs
#: the tests that execute its line). The farm's (Ray), the CLI's and the workflow's are left out: slow, and they
#: drive these modules through child processes, which the coverage recording does not see.
PLATFORM_TESTS = ("tests/test_results.py", "tests/test_status.py", "tests/test_certify.py", "tests/test_submission.py",
                  "tests/test_suite_clauses.py", "tests/test_suite_hash.py", "tests/test_plugin.py",
                  "tests/test_verifier.py", "tests/test_signing.py",
                  "tests/test_platform_rules.py")


#: Why a sanitized run cannot be made here (``Run.available``).
NO_LIBASAN = "the compiler has no libasan (apt-get install gcc)"


@dataclass(frozen=True)
class Run:
    """A certify run whose coverage is recorded: a target, with extra environment (a second code path)."""
    name: str
    target: str
    env: dict[str, str] = field(default_factory=dict)
    areas: tuple[str, ...] = ()  # areas whose mutants this run may judge (first run that covers a line wins)
    #: the fake libcuda's ASan/UBSan build loaded (``fakes.sanitizer_env``): a memory error of the fake that
    #: changes no result (a write past a buffer into memory nothing reads) ends the run there
    sanitized: bool = False

    @property
    def compiled(self) -> bool:
        """Whether the compiled hot path loads on this run (``ironaccel.native``): its classes then stand in for
        the pure-Python ones, whose bodies still run at import (``generated.compiled_standins``)."""
        return self.env.get("IRONACCEL_PURE_PYTHON") != "1"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this run's variables (``available`` says whether a sanitized one can be made)."""
        env = {**base, **self.env}
        if self.sanitized:
            from ironaccel import fakes

            env = fakes.sanitizer_env(env)
            if env is None:
                raise RuntimeError(f"{self.name}: {NO_LIBASAN}")
        return env

    def available(self) -> bool:
        """False for a sanitized run on a machine whose compiler has no libasan."""
        from ironaccel import fakes

        return not self.sanitized or fakes.sanitizer_env({}) is not None


#: In order of preference: a mutant is certified on the first run (of those its area lists) covering its line.
RUNS: tuple[Run, ...] = (
    Run("cuda/fake", "cuda/fake", {}, ("cuda", "fast", "fake", "core", "pool")),
    # the code the compiled hot path (ironaccel/_fast_c/) replaces when it loads: CUDA's and the MemPool's
    Run("cuda/fake pure-python", "cuda/fake", {"IRONACCEL_PURE_PYTHON": "1"}, ("cuda", "core", "pool")),
    # the fake's ASan/UBSan build: a memory error of a fake mutant (a write one past a stack array into the frame's
    # padding) changes no result on the -O2 build, but the sanitizer ends the run; judged after cuda/fake's
    Run("cuda/fake sanitized", "cuda/fake", {}, ("fake",), sanitized=True),
    # the compiled module loads on every backend (its MemPool core is backend-agnostic): one other backend's run
    # judges its mutants too (a non-CUDA device handed to code that assumed a CUDA one: invisible on cuda/fake)
    Run("vulkan/lavapipe", "vulkan/lavapipe", {}, ("vulkan", "fast", "core", "pool")),
    # the staged memory types, on the pure-Python path: the Vulkan code the compiled module stands in for (record.py's
    # cffi recording) runs only there, and nothing else of the backend differs between the two paths
    Run("vulkan/lavapipe-staged pure-python", "vulkan/lavapipe-staged", {"IRONACCEL_PURE_PYTHON": "1"}, ("vulkan",)),
    # another Vulkan driver, with other limits (4096 device allocations at most) and memory types than lavapipe's
    Run("vulkan/swiftshader", "vulkan/swiftshader", {}, ("vulkan",)),
    Run("webgpu/lavapipe", "webgpu/lavapipe", {}, ("webgpu", "core", "pool")),
    Run("opengl/llvmpipe", "opengl/llvmpipe", {}, ("opengl", "core", "pool")),
    Run("opencl/pocl", "opencl/pocl", {}, ("opencl", "core", "pool")),
)


#: Python file -> the kind under cache_dir() it fills from what it computes (nvrtc.py: NVRTC's results, keyed by a
#: hash nvrtc.py computes): a mutant of it starts that kind empty in its own cache, so what a mutant compiled
#: wrongly (an empty PTX under the key of a broken source) is never read by another run.
CACHE_WRITERS: dict[str, str] = {"ironaccel/backends/cuda/nvrtc.py": "nvrtc"}


@dataclass(frozen=True)
class CBuild:
    """A C build that a mutant of a file in ``folder`` changes: the mutant's copy builds it into a cache of its
    own, and the results file must say the run loaded that build (else the mutant is "not built")."""
    folder: str  # relative to the repository root
    cache: str  # the build's kind under cache_dir() (``cbuild.build``'s first argument)
    reported: str  # the key of the results file's ``builds`` that holds the loaded build's source hash
    roots: str  # what probe.py records of a test that calls into it: "fast" (methods called), "fake" (entry points)
    build: str  # Python, run in the mutant's copy: builds it and prints the source hash the build embeds


C_BUILDS: tuple[CBuild, ...] = (
    CBuild("ironaccel/_fast_c", "fast", "compiled", "fast",
           "from ironaccel import native; native.build(); print(native.sources_hash())"),
    CBuild("fakes/cuda", "fakecuda", "driver", "fake",
           "from ironaccel import fakes; fakes.build(); print(fakes.source_hash())"),
)


def c_build_of(file: str) -> CBuild:
    """The build a C file belongs to."""
    for b in C_BUILDS:
        if file.startswith(b.folder + "/"):
            return b
    raise ValueError(f"{file}: no C build of modules.C_BUILDS holds it")
