"""Size-selected variants: `variants` lists configs chosen by problem size; check validates every
variant of every target (diagnostics say which); the rendered launcher picks one with integer compares
before anything else; numerics of each variant's path under the interpreter (fp16 / fp32)."""

from __future__ import annotations

import json

import pytest
import torch
from kernels import catalogue, interpreter_variant

from specgen.check import check_spec
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.render.catalogue import render_module
from specgen.resolve import resolve
from specgen.spec.load import SpecError, load_text
from specgen.spec.models import parse_target

TOML = """\
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "bf16" }
b = { dtype = "bf16" }
out = { dtype = "bf16" }
tile = { m = 128, n = 256, k = 64 }
schedule = { persistent = true }
targets = ["triton:sm90", "triton:sm100", "cute:sm90"]

[[kernels.variants]]
when = { m_max = 16 }
tile = { m = 16, n = 64, k = 128 }
triton = { num_warps = 4 }

[[kernels.variants]]
when = { m_max = 128, n_max = 4096 }
tile = { m = 64, n = 128, k = 64 }
"""


def load(text: str = TOML, suffix: str = ".toml"):
    (ls,) = load_text(text, f"spec{suffix}", suffix)
    return ls


def line_of(text: str, needle: str, nth: int = 0) -> int:
    return [i for i, line in enumerate(text.splitlines(), 1) if needle in line][nth]


# --- the model ------------------------------------------------------------------------------------


def test_variants_layer_over_the_targets_config() -> None:
    spec = load().spec
    v0 = spec.for_target("triton:sm90", 0)
    assert (v0.tile.m, v0.tile.n, v0.tile.k) == (16, 64, 128) and v0.triton.num_warps == 4
    assert v0.schedule.persistent and v0.variants == []
    v1 = spec.for_target("triton:sm90", 1)
    assert v1.tile.n == 128 and v1.triton.num_warps == 8  # warps not given: the kernel's
    assert spec.for_target("triton:sm90").tile.n == 256  # the default
    # a per_target list replaces the kernel's on that target only
    text = TOML + '\n[kernels.per_target."triton:sm100"]\nvariants = [{ when = { m_max = 8 }, tile = { m = 16, n = 32, k = 64 } }]\n'
    spec = load(text).spec
    assert [str(v.when) for v in spec.variants_on("triton:sm100")] == ["M <= 8"]
    assert [str(v.when) for v in spec.variants_on("triton:sm90")] == ["M <= 16", "M <= 128 and N <= 4096"]
    assert spec.for_target("triton:sm100", 0).tile.n == 32


def test_a_variant_that_sets_only_its_bounds_is_the_targets_config() -> None:
    """resolve hands such a variant the target's effective spec itself (what is figured of it, once); a
    variant that sets anything, or a call without the base, gets a spec of its own."""
    text = TOML + '\n[[kernels.variants]]\nwhen = { m_max = 512 }\n'
    spec = load(text).spec
    base = spec.for_target("triton:sm90")
    assert spec.for_target("triton:sm90", 2, base=base) is base
    alone = spec.for_target("triton:sm90", 2)
    assert alone is not base and alone == base
    assert spec.for_target("triton:sm90", 1, base=base).tile.n == 128
    r = resolve(spec, parse_target("triton:sm90"))
    assert r.variants[2].spec is r.spec and r.variants[2].when.m_max == 512 and r.variants[1].spec is not r.spec


@pytest.mark.parametrize(("when", "words"), [
    ("{}", ["at least one of m_max"]),
    ("{ m_max = 0 }", ["greater than or equal to 1"]),
    ("{ m_max = 256 }", ["variant 2 (M <= 256) is never chosen", "variant 1"]),  # shadowed? no: 1 has n_max
    ("{ m_max = 16, n_max = 64 }", ["variant 2 (M <= 16 and N <= 64) is never chosen", "variant 0"]),
])
def test_variant_bounds_are_checked_at_load(when: str, words: list[str]) -> None:
    text = TOML + f"\n[[kernels.variants]]\nwhen = {when}\ntile = {{ m = 16, n = 16, k = 16 }}\n"
    if when == "{ m_max = 256 }":  # M <= 256 is wider than M <= 128 and N <= 4096: reachable
        assert len(load(text).spec.variants) == 3
        return
    with pytest.raises(SpecError) as info:
        load(text)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_every_format_spells_variants_alike() -> None:
    import tomllib
    import yaml

    data = tomllib.loads(TOML)
    dumps = {json.dumps(load(t, s).spec.model_dump(mode="json"), sort_keys=True)
             for t, s in ((TOML, ".toml"), (yaml.safe_dump(data), ".yaml"), (json.dumps(data), ".json"))}
    assert len(dumps) == 1


# --- check ----------------------------------------------------------------------------------------


def test_check_resolves_and_validates_every_variant_of_every_target() -> None:
    ls = load()
    r = resolve(ls.spec, parse_target("cute:sm90"))
    assert [v.variant for v in r.variants] == [0, 1] and r.variants[0].spec.tile.m == 16
    # tile.m = 16 is no wgmma M (64): an error on cute:sm90's variant 0 only, at the variant's tile line
    every = [d for d in check_spec(ls) if d.severity == "error"]
    # the CuTe sm90 design renders variants too (no CFG003): each is checked on its own
    assert not [d for d in every if d.rule == "CFG003"]
    diags = every
    assert diags and all(d.target == "cute:sm90" and d.variant == "variant 0 (M <= 16)" for d in diags)
    assert {d.line for d in diags if d.rule == "MMA001"} == {line_of(TOML, "tile = { m = 16")}
    assert "variant 0 (M <= 16)" in str(diags[0])


def test_a_variant_finding_on_an_unset_key_points_at_the_kernels_line() -> None:
    text = TOML.replace('targets = ["triton:sm90", "triton:sm100", "cute:sm90"]', 'targets = ["triton:sm90"]')
    text = text.replace("schedule = { persistent = true }", "schedule = { persistent = true }\ntriton = { num_warps = 48 }")
    diags = [d for d in check_spec(load(text)) if d.rule == "POW001" and "num_warps" in d.message]
    assert [d.variant for d in diags] == ["", "variant 1 (M <= 128 and N <= 4096)"]  # variant 0 sets 4 warps
    assert {d.line for d in diags} == {line_of(text, "num_warps = 48")}


def test_cfg002_a_variant_keeps_the_kernels_code_shape() -> None:
    ok = TOML.replace('"cute:sm90"]', '"triton:sm100"]').replace('"triton:sm100", "triton:sm100"', '"triton:sm100"')
    assert not [d for d in check_spec(load(ok)) if d.rule.startswith("CFG")]
    text = ok + "schedule = { persistent = false }\n"  # in variant 1
    diags = [d for d in check_spec(load(text)) if d.rule == "CFG002"]
    assert {d.target for d in diags} == {"triton:sm90", "triton:sm100"}
    assert all(d.variant.startswith("variant 1") and d.line == text.count("\n") for d in diags)
    assert "schedule.persistent = False in the variant, True on the target" in diags[0].message


def test_cfg001_the_targets_of_one_module_share_their_variant_bounds() -> None:
    ok = TOML.replace('"cute:sm90"]', '"triton:sm100"]').replace('"triton:sm100", "triton:sm100"', '"triton:sm100"')
    text = ok + '\n[kernels.per_target."triton:sm100"]\nvariants = [{ when = { m_max = 8 }, tile = { m = 16, n = 32, k = 64 } }]\n'
    (d,) = [d for d in check_spec(load(text)) if d.rule == "CFG001"]
    assert d.target == "triton:sm100" and "M <= 8 on triton:sm100" in d.message and d.line == text.count("\n")
    # the same bounds, per-target warps: fine
    text = ok + ('\n[kernels.per_target."triton:sm100"]\nvariants = [{ when = { m_max = 16 }, tile = { m = 16, n = 64, k = 128 } },'
                 ' { when = { m_max = 128, n_max = 4096 }, tile = { m = 64, n = 128, k = 64 }, triton = { num_warps = 4 } }]\n')
    assert not [d for d in check_spec(load(text)) if d.rule == "CFG001"]
    text = text.replace("n = 128, k = 64 }, triton", "n = 64, k = 64 }, triton")
    (d,) = [d for d in check_spec(load(text)) if d.rule == "CFG001"]
    assert d.variant.startswith("variant 1") and "tile" in d.message


# --- render ---------------------------------------------------------------------------------------


def test_the_module_lists_its_variants_and_selects_with_integer_compares() -> None:
    text = TOML.replace('"cute:sm90"]', '"triton:sm100"]').replace('"triton:sm100", "triton:sm100"', '"triton:sm100"')
    ls = load(text)
    module = render_module(ls, ls.spec.targets)
    doc = module.split('"""')[1]
    assert "0. M <= 16: tile 16x64x128, grouped 8, sm90 4 warps" in doc
    assert "1. M <= 128 and N <= 4096: tile 64x128x64" in doc
    run = module.split("def _run(", 1)[1].split("\n\n\n", 1)[0]
    assert "    if M <= 16:\n" in run and "    elif M <= 128 and N <= 4096:\n" in run
    # the selection comes before the descriptors, and they take the chosen boxes
    assert run.index("if M <= 16") < run.index("a_desc = descriptor(") and "a_box)" in run
    assert "\"variants\": [" in module.replace("'", '"')
    assert "VARIANT_CONFIGS = (" in module


# --- numerics under the interpreter ----------------------------------------------------------------

def variant_spec(dtype: str, tma: bool) -> dict:
    spec = interpreter_variant(catalogue()["gemm_bf16"])
    spec = json.loads(json.dumps(spec))
    for side in ("a", "b", "out"):
        spec[side]["dtype"] = dtype
    spec["name"] = f"var_{dtype}_{'tma' if tma else 'ptr'}"
    spec["tile"] = {"m": 32, "n": 32, "k": 32}
    spec["schedule"] = {"persistent": tma, "group_m": 2}
    spec["triton"] = {"num_warps": 4, "tma": tma}
    spec["variants"] = [
        {"when": {"m_max": 1}, "tile": {"m": 16, "n": 16, "k": 64}},
        {"when": {"m_max": 24, "n_max": 48}, "tile": {"m": 16, "n": 32, "k": 16}, "schedule": {"group_m": 1}},
    ]
    return spec


SHAPES = [  # (M, N, K, the variant that serves it)
    (1, 40, 72, 0),  # M = 1: N and K tails
    (17, 40, 24, 1),  # tails in every dim, K < the default tile.k
    (24, 48, 40, 1),  # at both bounds
    (25, 40, 40, None),  # M past variant 1: the default
    (20, 56, 16, None),  # N past variant 1
]


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "ptr"])
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_each_variants_path_computes_the_product(dtype: str, tma: bool, load_kernel, monkeypatch) -> None:
    spec = variant_spec(dtype, tma)
    mod = load_kernel(spec)
    chosen: list[int | None] = []
    real = mod._launcher

    class Spy:
        def __call__(self, *args, variant=None, **kw):
            chosen.append(variant)
            return real(*args, variant=variant, **kw)

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(mod, "_launcher", Spy())
    torch_dt = {"f16": torch.float16, "f32": torch.float32}[dtype]
    gen = torch.Generator().manual_seed(8)
    for m, n, k, expect in SHAPES:
        a = torch.randn(m, k, generator=gen).to(torch_dt)
        w = torch.randn(n, k, generator=gen).to(torch_dt)  # B K-major: a weight (N, K) passed as w.t()
        out = torch.full((m, n), float("nan"), dtype=torch_dt)
        got = getattr(mod, spec["name"])(a, w.t(), out=out)
        assert chosen[-1] == expect, (m, n, k)
        ref = REFERENCES["gemm"]([], a, w.t(), {})
        assert not got.isnan().any(), (m, n, k)
        tol = 2e-2 if dtype == "f16" else 1e-4
        torch.testing.assert_close(got.double(), ref, atol=tol * k ** 0.5, rtol=tol)


def test_check_prints_each_targets_variants(tmp_path) -> None:
    from typer.testing import CliRunner

    from specgen.cli import app

    path = tmp_path / "k.toml"
    path.write_text(TOML.replace('"cute:sm90"]', '"triton:sm100"]').replace('"triton:sm100", "triton:sm100"', '"triton:sm100"'))
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    line = "variants k @ triton:sm90: M <= 16: 16x64x128; M <= 128 and N <= 4096: 64x128x64; else 128x256x64"
    assert line in result.output and "variants k @ triton:sm100" in result.output
