"""The grouped Pallas TPU kernel's gated epilogue (halves: GRP204) in Pallas's strict TPU interpreter on the CPU (no
TPU here: uninitialized VMEM and reads past an array's end are NaN), against the grouped kind's float64 per-group
loop, and lowered for TPU on the CPU (Mosaic MLIR in a tpu_custom_call; libtpu's own compile needs a TPU). The forms
(specgen/kinds/grouped/testing/tpu_specs.py TPU_GATED_FORMS), B (G, 2N, K) K-major: SwiGLU with a bias after it and
an untouched tail (offs), the erf GeGLU in bf16 (tail zero), GeGLU-tanh with a router scale after it; B (G, K, 2N)
N-major (gate block j, up block j + N / tile.n): SwiGLU with a bias after it.

K-major: N = 130 and K = 200 over 8x128x128 blocks: an N tail in both halves (the up block of the last N block
reads the rows of half 1 past N, never half 0's) and a K tail; M = 21 rows in three row tiles, empty groups, a tile
shared by three groups; M = 1. N-major: N = 256 (two blocks a half; N = 130 refused, naming N and the block). Few
cases a form: the interpreter runs every grid step on the CPU."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from backends.pallas.test_grouped_tpu import CASES, Problem, render, tolerance
from specgen.kinds.grouped.testing.tpu_specs import TPU_GATED_FORMS as FORMS

M, N = 21, 130
K_MAJOR = [name for name, s in FORMS.items() if s["b"]["major"] == "k"]
N_MAJOR = "gt_swiglu_bias_nmajor"  # B (G, K, 2N): N a multiple of the block


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_tpu_gated")
    return {name: render(s, folder) for name, s in FORMS.items()}


@pytest.mark.parametrize("name", K_MAJOR)
def test_gated_forms_match_the_float64_loop(modules, name):
    """out[rows of g] = fn(a @ gate[g]) * (a @ up[g]) (then the bias row of g, or the router scale): empty groups
    in a row, a tile shared by three groups. The untouched form writes into a NaN-poisoned out: the groups' rows
    take no NaN (from the poison or from B's rows past N), every other row keeps the poison."""
    spec, module = FORMS[name], modules[name]
    problem = Problem(spec)
    untouched = spec["groups"]["tail"] == "untouched"
    poison = jnp.full((M, N), jnp.nan, problem.dtype)
    for case in ("ragged_tile_shared_by_3", "empty_middle_consecutive"):
        sizes = CASES[case]
        got = problem.call(module, sizes, out=poison)
        want, written = problem.reference(sizes)
        assert got.shape == (M, N) and not np.isnan(got[written]).any(), case
        assert np.isnan(got[~written]).all() if untouched else written.all(), case
        np.testing.assert_allclose(got[written], want[written], err_msg=case, **tolerance(spec))
    assert module._build.cache_info().currsize == 1  # one shape: one kernel for every case


def test_n_major_halves_read_blocks_j_and_j_plus_n_over_the_block(modules):
    """B (G, K, 2N) N-major: the gate block j and the up block j + N / tile.n of B as stored, N = 256 (two blocks a
    half), K = 200 (a K tail on B's rows), M = 21 with empty groups and a tile shared by three groups, and M = 1."""
    spec = FORMS[N_MAJOR]
    for m in (M, 1):
        problem = Problem(spec, m=m, n=256, g=6 if m == M else 3)
        for case in ("ragged_tile_shared_by_3", "empty_middle_consecutive") if m == M else ("no_tail",):
            sizes = CASES[case] if m == M else (0, 1, 0)
            got = problem.call(modules[N_MAJOR], sizes)
            want, written = problem.reference(sizes)
            assert got.shape == (m, 256) and not np.isnan(got).any(), case
            np.testing.assert_allclose(got[written], want[written], err_msg=case, **tolerance(spec))
            assert not got[~written].any()  # tail zero


def test_n_major_halves_refuse_an_n_off_the_block(modules):
    """N = 130: the up half starts at column 130, not a block boundary: refused when the call traces, naming N and
    the block (and the K-major layout that takes any N)."""
    problem = Problem(FORMS[N_MAJOR], n=130)
    with pytest.raises(ValueError, match=r"N = 130 must be a multiple of the block 128 \(store b K-major, \(G, 2N, K\)"):
        problem.call(modules[N_MAJOR], CASES["no_tail"])


def test_one_row_and_k_below_one_block(modules):
    """M = 1 (a block of one row) and K = 40 < tile.k, its row in the first group or the last or none."""
    spec = FORMS["gt_geglu_tanh_router"]
    problem = Problem(spec, m=1, k=40, g=3)
    for sizes in ((1, 0, 0), (0, 0, 1), (0, 0, 0)):
        want, written = problem.reference(sizes)
        got = problem.call(modules["gt_geglu_tanh_router"], sizes)
        np.testing.assert_allclose(got[written], want[written], **tolerance(spec))
        assert not got[~written].any()  # tail zero


def test_b_with_an_odd_row_count_is_refused_naming_it(modules):
    spec = FORMS["gt_geglu_tanh_router"]
    problem = Problem(spec)
    fn = getattr(modules["gt_geglu_tanh_router"], spec["name"])
    with pytest.raises(ValueError, match=r"b.shape\[1\] = 259 must be even"):
        fn(problem.a, problem.b[:, :-1], problem.index(CASES["no_tail"]), *(v for _, v in problem.args))


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_lower_to_mosaic_for_tpu(modules, name):
    """The design's compile hook: B's (G, 2, N, K) view read by two (tile.n, tile.k) blocks, the two dots and the
    two accumulators lower to a tpu_custom_call (3 groups, blocks ragged on every dim; with and without out)."""
    from specgen.kinds.grouped.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    module = modules[name]
    assert module.METADATA["gated"] == "halves" and ("(G, 2N, K)" if FORMS[name]["b"]["major"] == "k" else "(G, K, 2N)") in module.__doc__
    result = compile_module(module, TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error
