"""`triton.swap_ab` (issue 8, decode shapes): the kernel computes each tile transposed, out^T = B^T A^T,
so that tile.n sits on the MMA's row side (Hopper wgmma needs 64 rows; a decode tile.m of 16 would
fall back to mma.sync) and transposes the accumulator back before the epilogue. The model (hash kept
for specs without it), the MMA rules each side of their boundary, the rendered module, the plan's
SMEM, and numerics under the interpreter (fp16 / fp32 vs float64, NaN-poisoned outputs, M = 1, tails
on M / N / K, with and without split-K, every epilogue kind, batch, TMA and pointer kernels,
bit-identical reruns)."""

from __future__ import annotations

import json

import pytest
import torch
from kernels import MINIMAL_SPEC, catalogue, interpreter_variant
from test_split_k import EPILOGUES, SHAPES, _assert_close, _assert_workspace_reset, _run_all

from specgen.check import check_spec
from specgen.kinds.gemm.spec import GemmSpec
from specgen.render.catalogue import render_module
from specgen.spec.load import SpecError, load_text, spec_hash

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

TOML = """\
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "bf16" }
b = { dtype = "bf16" }
out = { dtype = "bf16" }
tile = { m = 128, n = 256, k = 64 }
schedule = { persistent = true }
targets = ["triton:sm90", "triton:sm100"]

[[kernels.variants]]
when = { m_max = 16 }
tile = { m = 16, n = 64, k = 128 }
triton = { swap_ab = true }
"""


def load(text: str = TOML):
    (ls,) = load_text(text, "spec.toml", ".toml")
    return ls


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- the model -------------------------------------------------------------------------------------

def test_swap_ab_defaults_off_and_a_spec_without_it_hashes_as_before() -> None:
    spec = GemmSpec.model_validate(MINIMAL_SPEC)
    assert spec.triton.swap_ab is False
    dumped = spec.model_dump(mode="json")
    assert "swap_ab" not in dumped["triton"]
    assert spec_hash(spec) == spec_hash(GemmSpec.model_validate(json.loads(json.dumps(dumped))))
    # written explicitly, even at the default, it is kept: a per_target or variant table may reset it
    off = GemmSpec.model_validate({**MINIMAL_SPEC, "triton": {"swap_ab": False}})
    assert off.model_dump(mode="json")["triton"]["swap_ab"] is False


def test_swap_ab_layers_per_variant_and_per_target() -> None:
    text = TOML + '\n[kernels.per_target."triton:sm100"]\ntriton = { swap_ab = true }\n'
    spec = load(text).spec
    assert spec.for_target("triton:sm90").triton.swap_ab is False
    assert spec.for_target("triton:sm90", 0).triton.swap_ab is True
    assert spec.for_target("triton:sm100").triton.swap_ab is True
    again = GemmSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec and spec_hash(again) == spec_hash(spec)


def test_targets_of_one_module_agree_on_swap_ab() -> None:
    # sm90 and sm100 render into one module whose SWAP_AB constant is one value: CFG001 at the line
    text = TOML + '\n[kernels.per_target."triton:sm100"]\ntriton = { swap_ab = true }\n'
    (d,) = [d for d in check_spec(load(text)) if d.rule == "CFG001"]
    assert d.severity == "error" and d.target == "triton:sm100" and d.line == len(text.splitlines())  # its table
    assert "triton.swap_ab = True on triton:sm100, False on triton:sm90" in d.message
    # the same swap on both targets, or a variant of its own, is fine
    both = (text + '\n[kernels.per_target."triton:sm90"]\ntriton = { swap_ab = true }\n').replace(
        "tile = { m = 128, n = 256, k = 64 }", "tile = { m = 64, n = 128, k = 64 }")
    assert not [d for d in check_spec(load(both)) if d.severity == "error"]
    assert not [d for d in check_spec(load()) if d.severity == "error"]


def test_swap_ab_is_a_strict_bool_named_at_its_line() -> None:
    text = TOML.replace("triton = { swap_ab = true }", "triton = { swap_ab = 1 }")
    with pytest.raises(SpecError) as info:
        load(text)
    assert "swap_ab" in str(info.value) and f"spec.toml:{line_of(text, 'swap_ab = 1')}" in str(info.value)
    assert GemmSpec.model_json_schema()["$defs"]["TritonOptions"]["properties"]["swap_ab"]["type"] == "boolean"


# --- the MMA rules, each side of the boundary -------------------------------------------------------

def _findings(rule: str, tile: dict, swap: bool, target: str) -> list:
    spec = {**MINIMAL_SPEC, "targets": [target], "tile": tile, "triton": {"num_warps": 4, "swap_ab": swap}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "spec.json", ".json")
    return [d for d in check_spec(ls) if d.rule == rule]


@pytest.mark.parametrize(("tile", "swap", "words"), [
    ({"m": 16, "n": 64, "k": 64}, False, ["tile.m = 16 < 64", "set triton.swap_ab = true"]),
    ({"m": 16, "n": 64, "k": 64}, True, None),  # tile.n = 64 rows: wgmma
    ({"m": 16, "n": 32, "k": 64}, True, ["tile.n = 32 < 64 with triton.swap_ab"]),
    ({"m": 64, "n": 32, "k": 64}, False, None),
    ({"m": 16, "n": 32, "k": 64}, False, ["tile.m = 16 < 64"]),  # no swap hint: tile.n < 64 too
])
def test_mma003_counts_the_mma_rows(tile: dict, swap: bool, words: list[str] | None) -> None:
    found = _findings("MMA003", tile, swap, "triton:sm90")
    if words is None:
        assert not found
        return
    (d,) = found
    text = d.message + " " + d.hint
    assert d.severity == "warning" and all(w in text for w in words), text
    if tile["n"] < 64:
        assert "swap_ab" not in d.hint


@pytest.mark.parametrize(("tile", "swap", "dim"), [
    ({"m": 16, "n": 64, "k": 64}, False, "m"),
    ({"m": 16, "n": 64, "k": 64}, True, None),
    ({"m": 64, "n": 32, "k": 64}, True, "n"),
    ({"m": 64, "n": 64, "k": 64}, True, None),
])
def test_mma004_on_tcgen05_counts_the_mma_rows(tile: dict, swap: bool, dim: str | None) -> None:
    found = [d for d in _findings("MMA004", tile, swap, "triton:sm100") if "tcgen05 to mma_v2" in d.message]
    if dim is None:
        assert not found
    else:
        (d,) = found
        assert d.message.startswith(f"tile.{dim} = {tile[dim]} < 64") and d.hint == f"use tile.{dim} = 64"


# --- the rendered module and the plan --------------------------------------------------------------

def test_the_module_names_swap_ab_in_its_docstring_metadata_and_constexprs() -> None:
    ls = load()
    text = render_module(ls, ls.spec.targets)
    assert "0. M <= 16: tile 16x64x128, grouped 8, operands swapped, " in text
    assert "SWAP_AB = False\n" in text and '"SWAP_AB": True' in text
    assert "acc = tl.dot(b.T, a.T, acc)" in text and "acc = acc.T" in text
    assert "SWAP_AB: tl.constexpr" in text
    # the default config swapped: the schedule line says so
    swapped = load(TOML.replace("schedule = { persistent = true }",
                                "schedule = { persistent = true }\ntriton = { swap_ab = true }"))
    assert "operands swapped (out^T = B^T A^T)." in render_module(swapped, swapped.spec.targets)
    # a module without swap_ab keeps its kernel as it was
    plain = load(TOML.split("[[kernels.variants]]")[0])
    text = render_module(plain, plain.spec.targets)
    assert "SWAP_AB" not in text and "b.T" not in text


def test_the_plan_counts_the_accumulator_transpose() -> None:
    from specgen.kinds.gemm.designs.triton.design import TritonGemm
    from specgen.targets import TARGETS

    design, sm90 = TritonGemm(), TARGETS["triton:sm90"]
    base = {**MINIMAL_SPEC, "tile": {"m": 16, "n": 64, "k": 128}, "triton": {"num_warps": 4}}
    plain = design.memory(GemmSpec.model_validate(base), sm90, 4)
    swapped = design.memory(GemmSpec.model_validate({**base, "triton": {"num_warps": 4, "swap_ab": True}}), sm90, 4)
    # the f32 accumulator, BLOCK_N x BLOCK_M, goes through scratch over the drained pipeline buffers:
    # it counts where it is larger than they are (measured, tests/data/grid_triton.jsonl)
    assert swapped.drained_bytes == 16 * 64 * 4 and "conversion scratch 4096 (reuses A/B)" in swapped.breakdown()
    assert swapped.total == plain.total == 4 * (16 + 64) * 128 * 2
    wide = {**base, "tile": {"m": 64, "n": 256, "k": 16}, "triton": {"num_warps": 4, "swap_ab": True}}
    assert design.memory(GemmSpec.model_validate(wide), sm90, 2).total == 64 * 256 * 4  # > 2 x 10240 of A/B


# --- numerics under the interpreter ----------------------------------------------------------------

def swap_spec(name: str, dtype: str, tma: bool, persistent: bool, split: bool, epilogue: str,
              batch: bool = False, default_swapped: bool = False) -> dict:
    """M = 1 and M <= 24 run swapped variants (split-K 5 and 3 where `split`), larger M the default
    config (itself swapped with `default_swapped`)."""
    spec = interpreter_variant(catalogue()["gemm_bf16"])
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = dtype
    spec.pop("per_target", None)
    sk = (lambda n: {"split_k": n}) if split else (lambda n: {})
    spec.update(name=name, targets=["triton:sm90", "triton:sm100"], batch=batch, epilogue=EPILOGUES[epilogue],
                tile={"m": 16, "n": 32, "k": 16}, schedule={"persistent": persistent, "group_m": 2},
                triton={"num_warps": 4, "tma": tma, **({"swap_ab": True} if default_swapped else {})},
                variants=[
                    {"when": {"m_max": 1}, "schedule": sk(5), "triton": {"swap_ab": True}},
                    {"when": {"m_max": 24}, "tile": {"m": 16, "n": 16, "k": 32}, "schedule": sk(3),
                     "triton": {"swap_ab": True}},
                ])
    return spec


@pytest.mark.parametrize("split", [False, True], ids=["no-split", "split-k"])
@pytest.mark.parametrize(("tma", "persistent"), [(True, True), (False, False), (False, True)],
                         ids=["tma-persistent", "ptr", "ptr-persistent"])
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_swapped_tiles_compute_the_product(dtype: str, tma: bool, persistent: bool, split: bool, load_kernel) -> None:
    name = f"swp_{dtype}_{int(tma)}{int(persistent)}_{int(split)}"
    spec = swap_spec(name, dtype, tma, persistent, split, "none")
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, dtype, "none", 0):
        _assert_close(got, ref, dtype, k, (m, n, k))
    if split:
        _assert_workspace_reset(mod)


@pytest.mark.parametrize("epilogue", ["bias_gelu", "rowcol_clamp", "residual"])
def test_the_epilogue_sees_the_untransposed_tile(epilogue: str, load_kernel) -> None:
    # row and column vectors, a residual matrix: applied to a transposed tile they would not match
    spec = swap_spec(f"swp_epi_{epilogue}", "f16", True, True, True, epilogue, default_swapped=True)
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, "f16", epilogue, 0):
        _assert_close(got, ref, "f16", k, (epilogue, m, n, k))


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "ptr"])
def test_batched_swapped_tiles(tma: bool, load_kernel) -> None:
    spec = swap_spec(f"swp_batch_{int(tma)}", "f16", tma, True, True, "residual", batch=True)
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, "f16", "residual", 3):
        _assert_close(got, ref, "f16", k, (m, n, k))


def test_swapped_split_k_is_bit_identical_run_to_run(load_kernel) -> None:
    spec = swap_spec("swp_det", "f32", True, True, True, "rowcol_clamp")
    mod = load_kernel(spec)
    first = [got.clone() for _, got, _ in _run_all(mod, spec, "f32", "rowcol_clamp", 0, seed=5)]
    second = [got for _, got, _ in _run_all(mod, spec, "f32", "rowcol_clamp", 0, seed=5)]
    assert all(torch.equal(x, y) for x, y in zip(first, second, strict=True))


def test_the_shapes_cover_m1_tails_and_every_config() -> None:
    # the numerics above run each variant (M = 1, M <= 24) and the default config, with tails
    assert {v for *_, v in SHAPES} == {0, 1, None} and any(m == 1 for m, *_ in SHAPES)
    assert any(m % 16 and n % 16 and k % 16 for m, n, k, _ in SHAPES)
