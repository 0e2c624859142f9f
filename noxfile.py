"""Sessions: `nox -s tests` (the CPU suite CI runs), `nox -s lint`, `nox -s render` (the catalogue),
`nox -s fresh` (the README's two commands in a fresh venv from a clean clone, what `.ci/run` does),
`nox -s gpu` (GPU tests + benchmark, on a CUDA machine), `nox -s diff` (check vs triton.compile, full grid),
`nox -s grid_mgpu` (check vs the Mosaic GPU lowering for CUDA; needs the jax-cuda12 plugin wheels),
`nox -s grid_grouped` / `grid_grouped_cute` / `grid_grouped_cute_k` / `grid_grouped_cute_sm100` / `grid_grouped_mgpu` /
`grid_grouped_mgpu_gated` / `grid_grouped_mgpu_k` (the grouped designs' compile grids)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The CPU suite: unit, golden, fuzz, interpreter numerics, AOT compiles (deselects `gpu`)."""
    # success_codes=[0]: pytest's exit 5 (no tests collected) fails the session, never passes silently
    # loadgroup: an xdist_group's tests run back to back on one worker: the Ray tests share one local cluster, and each
    # conformance (backend, spec) module is built by one worker (plain `load` built it in both)
    session.run("python", "-m", "pytest", "-m", "not gpu", "-n", "2", "--dist", "loadgroup", "-q", *session.posargs,
                success_codes=[0])


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", "specgen", "tests", "gpu", "noxfile.py", ".ci/fresh_venv.py")
    # analytic: the catalogue's near-boundary configs (about 120, nearly every Triton one) would take minutes to
    # compile cold on CI's 2 cores; the compile grids' records and the settle tests cover the compiler's side
    session.run("specgen", "render", "--check", "--no-compile")


@nox.session(python=False)
def render(session: nox.Session) -> None:
    session.run("specgen", "check")
    session.run("specgen", "render")


@nox.session(python=False)
def fresh(session: nox.Session) -> None:
    """A new user's path: clone HEAD, make a fresh venv, run README's two commands in it (minutes: not
    part of the default sessions; committed changes only, as a clone sees them)."""
    session.run("python", ".ci/fresh_venv.py", "--clone", external=True)


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Every `gpu`-marked test (tests/gpu, the conformance suite's GPU backends), then the benchmarks
    (gpu/run.sh); results under $OUT (default out/gpu)."""
    session.run("bash", "gpu/run.sh", *session.posargs, external=True)


@nox.session(python=False)
def diff(session: nox.Session) -> None:
    """Check vs triton.compile on the full seeded grid (tests/differential.py): compiles what
    tests/data/grid_triton.jsonl lacks (delete it to recompile everything) and rewrites it; CI replays it."""
    session.run("python", "tests/differential.py", *session.posargs,
                env={"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"})


@nox.session(python=False)
def grid_grouped(session: nox.Session) -> None:
    """The grouped Triton design vs triton.compile on its seeded grid (tests/grids/grouped_triton.py): compiles
    what tests/data/grid_grouped_triton.jsonl lacks and rewrites it; CI replays it (tests/grouped/test_grid.py)."""
    session.run("python", "tests/grids/grouped_triton.py", *session.posargs,
                env={"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"})


@nox.session(python=False)
def grid_grouped_cute(session: nox.Session) -> None:
    """The grouped CuTe sm90 design vs `cute.compile` for sm_90a on its seeded grid (tests/grids/grouped_cute_sm90.py,
    N SEED [RECORD]; default the record's 80 of seed 37): compiles what the record's work file lacks (resumable) and
    rewrites tests/data/grid_grouped_cute_sm90.json; CI replays it (tests/grouped/test_grid_compilers.py)."""
    session.run("python", "tests/grids/grouped_cute_sm90.py", *(session.posargs or ["80", "37"]))


@nox.session(python=False)
def grid_grouped_cute_k(session: nox.Session) -> None:
    """The grouped CuTe sm90 design's ragged-K kernel vs `cute.compile` for sm_90a on its seeded grid
    (tests/grids/grouped_cute_sm90_k.py, N SEED [RECORD]; default the record's 120 of seed 37), rewriting
    tests/data/grid_grouped_cute_sm90_k.json; CI replays it (tests/grouped/test_grid_compilers.py)."""
    session.run("python", "tests/grids/grouped_cute_sm90_k.py", *(session.posargs or ["120", "37"]))


@nox.session(python=False)
def grid_grouped_cute_sm100(session: nox.Session) -> None:
    """The grouped CuTe sm100 design vs `cute.compile` for sm_100a on its seeded grid (tests/grids/grouped_cute_sm100.py,
    N SEED [RECORD]; default the record's 100 of seed 37), rewriting tests/data/grid_grouped_cute_sm100.json; CI
    replays it (tests/grouped/test_grid_compilers.py)."""
    session.run("python", "tests/grids/grouped_cute_sm100.py", *(session.posargs or ["100", "37"]))


@nox.session(python=False)
def grid_grouped_mgpu(session: nox.Session) -> None:
    """The grouped Mosaic GPU design vs its lowering for CUDA on the CPU (tests/grids/grouped_mgpu.py, N SEED
    [RECORD]; default 100 of seed 37), rewriting tests/data/grid_grouped_mgpu.json; CI replays it
    (tests/grouped/test_grid_compilers.py)."""
    session.run("python", "tests/grids/grouped_mgpu.py", *(session.posargs or ["100", "37"]))


@nox.session(python=False)
def grid_grouped_mgpu_gated(session: nox.Session) -> None:
    """The grouped Mosaic GPU design's gated epilogue vs its lowering for CUDA (tests/grids/grouped_mgpu_gated.py,
    N SEED [RECORD]; default 60 of seed 40), rewriting tests/data/fresh/fresh_grouped_mgpu_gated_40.json."""
    session.run("python", "tests/grids/grouped_mgpu_gated.py", *(session.posargs or ["60", "40"]))


@nox.session(python=False)
def grid_grouped_mgpu_k(session: nox.Session) -> None:
    """The grouped Mosaic GPU design's ragged-K kernel vs its lowering for CUDA (tests/grids/grouped_mgpu_k.py, N SEED
    [RECORD]; default 120 of seed 37), rewriting tests/data/grid_grouped_mgpu_k.json; CI replays it
    (tests/grouped/test_grid_compilers.py)."""
    session.run("python", "tests/grids/grouped_mgpu_k.py", *(session.posargs or ["120", "37"]))


@nox.session(python=False)
def grid_mgpu(session: nox.Session) -> None:
    """Check vs the Mosaic GPU lowering for CUDA, re-recording tests/data/grid_mgpu.json (tests/grids/mgpu.py;
    needs jax's jax-cuda12 plugin/pjrt wheels, never CI's; CI replays the record in tests/test_grid_mgpu.py)."""
    n = session.posargs[0] if session.posargs else "300"
    session.run("python", "tests/grids/mgpu.py", n, "11", "tests/data/grid_mgpu.json")
