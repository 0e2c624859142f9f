"""Split-K (issue 8): `schedule.split_k` divides each output tile's K loop between programs, whose f32
partials the last-arriving program of the tile sums (in split order unless the spec opts into float
atomics) before the epilogue runs once. The model, the rules, the rendered module, the launcher's
workspace cache, and numerics under the interpreter (fp16 / fp32 vs float64, NaN-poisoned outputs,
M = 1, K tails, K not a multiple of split_k x tile.k, empty splits, every epilogue kind, batch)."""

from __future__ import annotations

import json

import pytest
import torch
from kernels import MINIMAL_SPEC, catalogue, interpreter_variant

from specgen.check import check_spec
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.reference import REFERENCES
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
schedule = { split_k = 4 }

[[kernels.variants]]
when = { m_max = 128, k_max = 8192 }
tile = { m = 64, n = 128, k = 64 }
schedule = { split_k = 2, split_k_reduction = "atomic" }
"""


def load(text: str = TOML):
    (ls,) = load_text(text, "spec.toml", ".toml")
    return ls


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- the model -------------------------------------------------------------------------------------

def test_split_k_defaults_and_a_spec_without_it_hashes_as_before() -> None:
    spec = GemmSpec.model_validate(MINIMAL_SPEC)
    assert spec.schedule.split_k == 1 and spec.schedule.split_k_reduction == "deterministic"
    dumped = spec.model_dump(mode="json")
    assert "split_k" not in dumped["schedule"] and "split_k_reduction" not in dumped["schedule"]
    # the shipped specs without split-K keep their hashes (their generated modules are unchanged)
    assert spec_hash(spec) == spec_hash(GemmSpec.model_validate(json.loads(json.dumps(dumped))))
    # written explicitly, even at the default, it is kept: a per_target or variant table may reset it
    one = GemmSpec.model_validate({**MINIMAL_SPEC, "schedule": {"split_k": 1}})
    assert one.model_dump(mode="json")["schedule"]["split_k"] == 1


def test_split_k_layers_per_variant_and_per_target() -> None:
    text = TOML + '\n[kernels.per_target."triton:sm100"]\nschedule = { split_k = 3 }\n'
    spec = load(text).spec
    assert spec.for_target("triton:sm90").schedule.split_k == 1
    assert spec.for_target("triton:sm90", 0).schedule.split_k == 4
    v1 = spec.for_target("triton:sm90", 1).schedule
    assert (v1.split_k, v1.split_k_reduction) == (2, "atomic")
    assert spec.for_target("triton:sm100").schedule.split_k == 3
    # a dumped spec loads back as the same spec
    again = GemmSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec and spec_hash(again) == spec_hash(spec)


@pytest.mark.parametrize(("value", "words"), [
    ("0", ["schedule.split_k", "greater than or equal to 1"]),
    ("65", ["schedule.split_k", "less than or equal to 64"]),
    ('"2"', ["schedule.split_k", "valid integer"]),
    ("2.0", ["schedule.split_k"]),
])
def test_split_k_bounds_are_refused_at_load_naming_the_field(value: str, words: list[str]) -> None:
    text = TOML.replace("schedule = { persistent = true }", f"schedule = {{ persistent = true, split_k = {value} }}")
    with pytest.raises(SpecError) as info:
        load(text)
    message = str(info.value)
    assert all(w in message for w in words), message
    assert f"spec.toml:{line_of(text, 'split_k = ' + value)}" in message


def test_an_unknown_reduction_is_refused() -> None:
    text = TOML.replace('split_k_reduction = "atomic"', 'split_k_reduction = "fast"')
    with pytest.raises(SpecError) as info:
        load(text)
    assert "split_k_reduction" in str(info.value) and "'deterministic' or 'atomic'" in str(info.value)


def test_the_json_schema_documents_split_k() -> None:
    schedule = GemmSpec.model_json_schema()["$defs"]["Schedule"]["properties"]
    assert schedule["split_k"]["minimum"] == 1 and schedule["split_k"]["maximum"] == 64
    assert schedule["split_k_reduction"]["enum"] == ["deterministic", "atomic"]


# --- check -----------------------------------------------------------------------------------------

def test_check_reports_split_k_findings_at_the_variants_line() -> None:
    text = TOML.replace("when = { m_max = 128, k_max = 8192 }", "when = { m_max = 128, k_max = 64 }")
    diags = check_spec(load(text))
    spk = [d for d in diags if d.rule == "SPK002"]
    assert spk and all(d.severity == "error" for d in spk)
    assert spk[0].line == line_of(text, 'split_k = 2, split_k_reduction = "atomic"')
    assert "split_k = 2 > 1 K tiles at k_max = 64 (tile.k = 64)" in spk[0].message
    assert "variant 1" in spk[0].variant
    assert not [d for d in check_spec(load()) if d.severity == "error"]


def test_cute_sm100_refuses_split_k_and_cute_sm90_takes_it() -> None:
    text = TOML.replace('targets = ["triton:sm90", "triton:sm100"]', 'targets = ["triton:sm90", "cute:sm90", "cute:sm100"]')
    for target in ("cute:sm90", "cute:sm100"):
        text += f'\n[kernels.per_target."{target}"]\nvariants = []\ntile = {{ m = 128, n = 128, k = 64 }}\nschedule = {{ split_k = 2 }}\n'
    diags = check_spec(load(text))
    spk = [d for d in diags if d.rule == "SPK001"]
    assert [d.target for d in spk] == ["cute:sm100"]
    assert spk[0].line == text.splitlines().index("schedule = { split_k = 2 }", line_of(text, '."cute:sm100"]')) + 1
    assert "the CuTe sm100 design renders no split-K (the CuTe sm90 and Triton designs do)" in spk[0].message
    assert not [d for d in diags if d.target == "cute:sm90" and d.severity == "error"]


# --- the rendered module ---------------------------------------------------------------------------

def test_the_module_names_split_k_in_its_docstring_metadata_and_launch() -> None:
    ls = load()
    text = render_module(ls, ls.spec.targets)
    assert "0. M <= 16: tile 16x64x128, grouped 8, split-K 4 (ordered sum)" in text
    assert "1. M <= 128 and K <= 8192: tile 64x128x64, grouped 8, split-K 2 (float atomics)" in text
    assert "SPLIT_K, SPLIT_K_ATOMIC = 1, False" in text
    assert '"SPLIT_K": 4, "SPLIT_K_ATOMIC": False' in text and '"SPLIT_K": 2, "SPLIT_K_ATOMIC": True' in text
    assert "def _split_k_reduce(" in text and "grid = tiles * split_k\n" in text  # the launch grid
    assert "_launcher.workspace(device, tiles, split_k, block_m * block_n, split_atomic)" in text
    # a module without split-K keeps its kernel as it was: no workspace, no reduction
    plain = load(TOML.split("[[kernels.variants]]")[0])
    text = render_module(plain, plain.spec.targets)
    assert "SPLIT_K" not in text and "ws_ptr" not in text and "_split_k_reduce" not in text


# --- numerics under the interpreter ----------------------------------------------------------------

EPILOGUES = {
    "none": [],
    "bias_gelu": [{"op": "bias", "along": "n", "dtype": "f16"}, {"op": "activation", "fn": "gelu_tanh"}],
    "rowcol_clamp": [{"op": "scale", "by": "rowcol"}, {"op": "clamp", "min": -3.0, "max": 3.0}],
    "residual": [{"op": "scale", "by": "scalar"}, {"op": "residual", "dtype": "f16", "beta": 0.5}],
}


def split_spec(name: str, dtype: str, tma: bool, persistent: bool, reduction: str, epilogue: str,
               batch: bool = False) -> dict:
    spec = interpreter_variant(catalogue()["gemm_bf16"])
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = dtype
    spec.pop("per_target", None)
    spec.update(name=name, targets=["triton:sm90", "triton:sm100"], batch=batch, epilogue=EPILOGUES[epilogue],
                tile={"m": 16, "n": 32, "k": 16}, schedule={"persistent": persistent, "group_m": 2},
                triton={"num_warps": 4, "tma": tma},
                variants=[  # M = 1: 5 splits; M <= 24: 3 splits; else the default config (no split)
                    {"when": {"m_max": 1}, "schedule": {"split_k": 5, "split_k_reduction": reduction}},
                    {"when": {"m_max": 24}, "tile": {"m": 16, "n": 16, "k": 32},
                     "schedule": {"split_k": 3, "split_k_reduction": reduction}},
                ])
    return spec


SHAPES = [  # (M, N, K, variant): K tails, K not a multiple of split_k * tile.k, splits left without K
    (1, 40, 72, 0),  # 5 K tiles over 5 splits
    (1, 24, 24, 0),  # 2 K tiles: 3 of the 5 splits only add zeros
    (17, 40, 104, 1),  # tails on M, N and K; 4 K tiles over 3 splits (2, 2, 0)
    (24, 16, 200, 1),  # 7 K tiles over 3 splits
    (30, 48, 40, None),  # the default config
]


def _inputs(m: int, n: int, k: int, dtype: torch.dtype, epilogue: str, batch: int, gen: torch.Generator):
    lead = (batch,) if batch else ()
    a = torch.randn(*lead, m, k, generator=gen).to(dtype)
    w = torch.randn(*lead, n, k, generator=gen).to(dtype)
    args: dict[str, object] = {}
    if epilogue == "bias_gelu":
        args["bias"] = torch.randn(n, generator=gen).half()
    elif epilogue == "rowcol_clamp":
        args["scale_a"] = torch.rand(m, generator=gen) + 0.5
        args["scale_b"] = torch.rand(n, generator=gen) + 0.5
    elif epilogue == "residual":
        args["alpha"] = 0.75
        args["c"] = torch.randn(*lead, m, n, generator=gen).half()
    return a, w, args


def _run_all(mod, spec: dict, dtype: str, epilogue: str, batch: int, seed: int = 8):
    torch_dt = {"f16": torch.float16, "f32": torch.float32}[dtype]
    gen = torch.Generator().manual_seed(seed)
    fn = getattr(mod, spec["name"])
    for m, n, k, variant in SHAPES:
        a, w, args = _inputs(m, n, k, torch_dt, epilogue, batch, gen)
        lead = (batch,) if batch else ()
        out = torch.full((*lead, m, n), float("nan"), dtype=torch_dt)
        got = fn(a, w.transpose(-1, -2), *args.values(), out=out)
        yield (m, n, k, variant), got, REFERENCES["gemm"](mod.SPEC["epilogue"], a, w.transpose(-1, -2), args)


def _assert_close(got: torch.Tensor, ref: torch.Tensor, dtype: str, k: int, what: object) -> None:
    assert not got.isnan().any(), what
    tol = 2e-2 if dtype == "f16" else 1e-4
    torch.testing.assert_close(got.double(), ref, atol=tol * k ** 0.5, rtol=tol, msg=lambda m: f"{what}: {m}")


def _assert_workspace_reset(mod) -> None:
    """Every launch leaves the arrival counters (and the atomic partials) at zero."""
    for (_device, _stream, atomic), (ws, counts) in mod._launcher._workspaces.items():
        assert not counts.any()
        if atomic:
            assert not ws.any()


@pytest.mark.parametrize("reduction", ["deterministic", "atomic"])
@pytest.mark.parametrize(("tma", "persistent"), [(True, True), (False, False), (False, True)],
                         ids=["tma-persistent", "ptr", "ptr-persistent"])
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_split_k_computes_the_product(dtype: str, tma: bool, persistent: bool, reduction: str, load_kernel) -> None:
    name = f"spk_{dtype}_{int(tma)}{int(persistent)}_{reduction[:3]}"
    spec = split_spec(name, dtype, tma, persistent, reduction, "none")
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, dtype, "none", 0):
        _assert_close(got, ref, dtype, k, (m, n, k))
    _assert_workspace_reset(mod)


@pytest.mark.parametrize("epilogue", ["bias_gelu", "rowcol_clamp", "residual"])
def test_the_epilogue_runs_once_on_the_full_sum(epilogue: str, load_kernel) -> None:
    # a nonlinear epilogue applied per split, or twice, would not match the reference
    spec = split_spec(f"spk_epi_{epilogue}", "f16", True, True, "deterministic", epilogue)
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, "f16", epilogue, 0):
        _assert_close(got, ref, "f16", k, (epilogue, m, n, k))


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "ptr"])
def test_batched_split_k(tma: bool, load_kernel) -> None:
    spec = split_spec(f"spk_batch_{int(tma)}", "f16", tma, True, "deterministic", "residual", batch=True)
    mod = load_kernel(spec)
    for (m, n, k, _), got, ref in _run_all(mod, spec, "f16", "residual", 3):
        _assert_close(got, ref, "f16", k, (m, n, k))
    _assert_workspace_reset(mod)


def test_the_ordered_sum_is_bit_identical_run_to_run(load_kernel) -> None:
    spec = split_spec("spk_det", "f32", True, True, "deterministic", "rowcol_clamp")
    mod = load_kernel(spec)
    first = [got.clone() for _, got, _ in _run_all(mod, spec, "f32", "rowcol_clamp", 0, seed=5)]
    second = [got for _, got, _ in _run_all(mod, spec, "f32", "rowcol_clamp", 0, seed=5)]
    assert all(torch.equal(x, y) for x, y in zip(first, second, strict=True))


def test_the_workspace_is_cached_per_device_stream_and_reduction_and_grows(load_kernel) -> None:
    spec = split_spec("spk_ws", "f16", True, True, "deterministic", "none")
    launcher = load_kernel(spec)._launcher
    ws, counts = launcher.workspace(-1, 4, 3, 16 * 16, False)
    assert ws.numel() >= 4 * 3 * 256 and counts.numel() >= 4 and ws.dtype is torch.float32 and counts.dtype is torch.int32
    assert launcher.workspace(-1, 2, 3, 16 * 16, False) == (ws, counts)  # smaller: the same buffers
    atomic_ws, atomic_counts = launcher.workspace(-1, 4, 3, 16 * 16, True)
    assert atomic_ws is not ws and atomic_ws.numel() >= 4 * 256 and not atomic_ws.any()
    bigger, bigger_counts = launcher.workspace(-1, 40, 3, 16 * 16, False)
    assert bigger is not ws and bigger.numel() >= 40 * 3 * 256 and not bigger_counts.any()
    # a config without split-K takes what is cached: nothing is allocated for it
    assert launcher.workspace(-1, 10_000, 1, 128 * 256, False) == (bigger, bigger_counts)


def test_check_prints_each_variants_split(tmp_path) -> None:
    from typer.testing import CliRunner

    from specgen.cli import app

    path = tmp_path / "k.toml"
    path.write_text(TOML)
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    line = ("variants k @ triton:sm90: M <= 16: 16x64x128 split-K 4; M <= 128 and K <= 8192: 64x128x64 split-K 2 atomic; "
            "else 128x256x64")
    assert line in result.output
