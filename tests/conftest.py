"""The CPU suite runs every Triton kernel under the interpreter: TRITON_INTERPRET must be set before
triton (or specgen.runtime.guards, which reads it at import) is imported, so it is set here, when pytest
loads this file, ahead of every test module. A GPU run sets TRITON_INTERPRET=0 in its environment."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
# The interpreter's dots are numpy matmuls on tiny tiles: one BLAS/OpenMP thread per pytest worker
# (`-n 2` on 2 cores); more only spin (sched_yield) against each other when the machine is busy.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# check settles near-boundary verdicts with the compiler and caches them: the suite's cache is its own (one
# for every worker and run on this machine), never the user's ~/.cache
os.environ.setdefault("SPECGEN_SETTLE_CACHE", os.path.join(__import__("tempfile").gettempdir(),
                                                           f"specgen-test-settle-{os.getuid()}"))

# ... and keeps them the model's (`--no-compile`) unless a test settles with the compiler on purpose
# (tests/test_settle.py, tests/test_compile_spills.py): a cold cache would compile every near Triton config
os.environ.setdefault("SPECGEN_NO_COMPILE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory):
    """Where the tests render their spec variants (one folder per pytest worker)."""
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(scope="session")
def load_kernel(kernel_dir):
    """load_kernel(spec) -> the rendered, imported module, once per spec name per worker process (the
    custom op `specgen::<name>` is registered once per process, so one name must mean one spec)."""
    from kernels import load_module

    loaded: dict[str, tuple[dict, object]] = {}

    def load(spec: dict):
        name = spec["name"]
        if name in loaded:
            first, module = loaded[name]
            assert first == spec, f"two different test specs are both named {name!r}"
            return module
        module = load_module(spec, kernel_dir)
        loaded[name] = (spec, module)
        return module

    return load
