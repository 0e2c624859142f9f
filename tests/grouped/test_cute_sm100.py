"""The grouped CuTe sm100 design (Blackwell, tcgen05) on this CPU machine. There is no Blackwell GPU here: the design
is verified by compiling for sm_100a and reading the SASS, nothing else (no numerics, no speed).

- every form (specgen/kinds/grouped/testing/cute_sm100_specs.py) passes check and renders `cute/<name>_sm100.py`;
  each compiles through `cute.compile` over fake tensors (dynamic M, N, K, G) with exactly the SMEM and TMEM the plan
  allocates, TMA loads (no TMA store: the epilogue's stores are predicated on the group's rows), tcgen05 MMAs
  (UTCHMMA) and no local-memory spills;
- a catalogue cute:sm100 grouped kernel's committed module compiles so too, and its SASS holds the 16-byte vector
  stores (every catalogue cute:sm100 kernel compiles in tests/backends/cute/test_cute_sm100.py);
- the launcher's guards refuse a bad dtype, shape, stride, major, device or index before anything launches, and a
  misaligned base is staged to an aligned copy;
- a render that skipped check refuses what the kernel cannot do (2-CTA, an M-major A).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.grouped.testing.cute_sm100_specs import CUTE_SM100_FORMS, GUARD_SM100
from specgen.kinds.grouped.testing.guards import GroupedGuardTests
from specgen.render.catalogue import render_modules
from specgen.spec.load import load_paths, load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
ROOT = Path(__file__).resolve().parents[2]
SMEM_PER_BLOCK = 232448  # sm100 (targets.py)


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def catalogue_sm100() -> dict[str, object]:
    return {ls.name: ls for ls in load_paths([ROOT / "specs"]) if ls.spec.kind == "grouped"
            and any(str(t) == "cute:sm100" for t in ls.spec.targets)}


def a_box_loads(spec) -> int:
    """UTMALDG one load site per operand issues for a K-major A and B: one per 128 bytes of the box's K extent
    (the 128-byte swizzle bounds a box's inner dimension)."""
    t = spec.tile
    return math.ceil(t.k * spec.a.dtype.bytes / 128) + math.ceil(t.k * spec.b.dtype.bytes / 128)


def check_compiled(r, spec) -> None:
    assert not r.error, r
    assert r.compiler_smem == r.plan_smem <= SMEM_PER_BLOCK, r  # the dense design's struct, to the byte
    assert r.resources["tmem_columns"] == r.resources["plan_tmem_columns"] > 0, r
    mma, other = ("UTCQMMA", "UTCHMMA") if spec.a.dtype.bytes == 1 else ("UTCHMMA", "UTCQMMA")
    assert r.sass[mma] > 0 and r.sass[other] == 0, r.sass  # tcgen05 kind::f8f6f4 for fp8, kind::f16 else
    assert r.sass["UTMALDG"] >= 2 and r.sass["UTMASTG"] == 0, r.sass  # TMA loads; predicated stores
    if spec.b.major == "k":
        assert r.sass["UTMALDG"] == a_box_loads(spec), r.sass  # one load site per operand
    assert r.sass["LDL"] == 0 and r.sass["STL"] == 0 and r.resources["frame_bytes"] == 0, r


def test_the_catalogue_renders_its_moe_kernels_on_cute_sm100():
    assert set(catalogue_sm100()) == {"moe_bf16", "moe_up_bias_silu_bf16", "moe_down_router_bf16", "moe_fp8_rowwise"}


@pytest.mark.parametrize("name", ["moe_bf16", "moe_fp8_rowwise"])
def test_catalogue_modules_carry_a_decode_variant_with_its_own_plan(name):
    """The catalogue's cute:sm100 kernels carry a decode variant (M <= 64: a 64-row 1-CTA MMA, 256 bytes of K a
    stage): a Config row of its own (its stages, SMEM and TMEM as check resolved them), picked by M (the launcher's
    comparison: tests/grouped/test_cute_sm90.py runs it on both designs) and listed in METADATA, which `specgen
    compile` reads: every config compiles for sm_100a in tests/backends/cute/test_cute_sm100.py."""
    from specgen.compile import load_rendered
    from specgen.resolve import resolve

    ls = catalogue_sm100()[name]
    (t,) = [t for t in ls.spec.targets if str(t) == "cute:sm100"]
    r = resolve(ls.spec, t)
    (v,) = r.variants
    module = load_rendered(ROOT / "generated" / "cute" / f"{name}_sm100.py", f"_specgen_test_cute100_variant_{name}")
    (cfg,) = module.VARIANT_CONFIGS
    assert (cfg.tile_m, cfg.tile_n, cfg.tile_k * ls.spec.a.dtype.bytes) == (64, 128, 256)
    assert (cfg.ab_stages, cfg.acc_stages, cfg.smem_bytes) == (v.ab_stages, v.acc_stages, v.budget.total)
    assert (module.CONFIG.tile_m, module.CONFIG.tmem_columns) == (128, 512) and module.config(0) is cfg
    assert "    if M <= 64:\n        variant = 0\n    else:\n        variant = None\n" in Path(module.__file__).read_text()
    (meta,) = module.METADATA["plan"][100]["variants"]
    assert meta["when"] == {"M": 64} and meta["tile"] == [64, 128, cfg.tile_k] and meta["smem_bytes"] == v.budget.total
    assert meta["tmem_columns"] == cfg.tmem_columns


@pytest.mark.parametrize("name", sorted(CUTE_SM100_FORMS))
def test_each_form_checks_clean_and_compiles_for_sm100a_with_the_plans_smem_and_tmem(name, tmp_path, monkeypatch):
    from specgen.compile import load_rendered
    from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    ls = load(CUTE_SM100_FORMS[name])
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    ((rel, text),) = render_modules(ls, ls.spec.targets).items()
    assert rel == f"cute/{name}_sm100.py" and f"def {name}(" in text
    path = tmp_path / Path(rel).name
    path.write_text(text)
    module = load_rendered(path, f"_specgen_test_cute100_grouped_{name}")
    (r,) = compile_module(module, target_info("cute:sm100"), sass=True, fill_cache=False)
    check_compiled(r, ls.spec)


def test_the_catalogue_kernel_compiles_with_vector_stores_predicated_on_the_groups_rows(tmp_path):
    """The generated module as committed: compiled for sm_100a, its SASS read whole. The epilogue stores 16-byte
    vectors (STG.E.128) from its SMEM subtiles and no TMA store; 128x256 fp32 accumulators in two stages fill
    TMEM's 512 columns."""
    from specgen.compile import load_rendered
    from specgen.kinds.gemm.designs.cubin import nvdisasm, sass_counts
    from specgen.kinds.gemm.designs.cute_sm100.compile import SASS_OPS, tmem_alloc_columns

    name = "moe_up_bias_silu_bf16"
    ls = catalogue_sm100()[name]
    module = load_rendered(ROOT / "generated" / "cute" / f"{name}_sm100.py", "_specgen_test_cute100_grouped_catalogue")
    assert module.CONFIG.tmem_columns == 512 and module.CONFIG.acc_stages == 2
    compiled = module._launcher.compile(None, f"--keep-cubin --keep-ptx --dump-dir {tmp_path}")
    cubin = compiled.artifacts.CUBIN
    if isinstance(cubin, bytes):
        (tmp_path / "k.cubin").write_bytes(cubin)
        cubin = tmp_path / "k.cubin"
    counts, local = sass_counts(str(cubin), SASS_OPS)
    assert counts["UTMALDG"] == a_box_loads(ls.spec) and counts["UTCHMMA"] > 0 and counts["UTMASTG"] == 0, counts
    assert counts["LDL"] == counts["STL"] == 0 and local["spill_store_bytes"] == 0
    import subprocess

    sass = subprocess.run([nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "STG.E.128" in sass  # the predicated 16-byte vector stores
    ptx = compiled.artifacts.PTX
    text = ptx if isinstance(ptx, str) and "tcgen05" in ptx else Path(ptx).read_text()
    assert tmem_alloc_columns(text) == 512


def test_the_spec_takes_cute_sm100_and_its_module_documents_the_design():
    ls = load(CUTE_SM100_FORMS["gb_every_op"])
    ((rel, text),) = render_modules(ls, ls.spec.targets).items()
    assert rel == "cute/gb_every_op_sm100.py"
    assert "bias: + bias[g] (G, N) bf16, per group and column" in text
    assert "scale: * w[g, n] (G, N) f32, per group and column" in text
    assert "1-CTA tcgen05 MMA" in text and "predicated" in text
    assert "Verified by compiling for sm_100a and reading the SASS only" in text
    compile(text, rel, "exec")


@pytest.mark.parametrize(("changes", "says"), [
    ({"cute": {"two_cta": True}, "cluster": {"m": 2, "n": 1}}, "one CTA a tile, no cluster (GRP402)"),
    ({"a": {"dtype": "bf16", "major": "mn"}}, "K-major A (GRP001, GRP401)"),
])
def test_a_render_that_skipped_check_refuses_what_the_kernel_cannot_do(changes, says):
    from specgen.kinds.grouped.designs.cute_sm100.design import DESIGN
    from specgen.resolve import resolve

    ls = load({**CUTE_SM100_FORMS["gb_offs_untouched_kk"], "name": "refused", **changes})
    (t,) = ls.spec.targets
    with pytest.raises(ValueError, match=f"refused: .*{says.replace('(', r'.').replace(')', r'.')}"):
        DESIGN.render(ls, [t], {str(t): resolve(ls.spec, t)})
    assert any(d.severity == "error" and d.rule in ("GRP001", "GRP402") for d in check_all([ls]))


@pytest.fixture(scope="module")
def sm100_modules(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cute100_grouped_guards")
    cache: dict = {}

    def get(spec: dict):
        if spec["name"] not in cache:
            cache[spec["name"]] = load_target_module(spec, "cute:sm100", folder, "_specgen_cute100_grouped_guard_")[0]
        return cache[spec["name"]]

    return get


class TestCuteSm100GroupedGuards(GroupedGuardTests):
    """The grouped kind's guard cases on this design's torch entry (CPU tensors: under TRITON_INTERPRET=1 the guards
    take the CPU as the device, 'meta' stands for another; the kernel itself needs a Blackwell GPU)."""

    SPEC = GUARD_SM100

    @pytest.fixture
    def module(self, sm100_modules):
        return sm100_modules


class Recorder:
    """Stands in for the launcher: records what the entry would launch."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.ready = {(-1, None): (lambda *args: self.calls.append(args), 148)}


def test_a_valid_call_reaches_the_launch_with_a_misaligned_base_staged(sm100_modules, monkeypatch):
    module = sm100_modules(GUARD_SM100)
    recorder = Recorder()
    monkeypatch.setattr(module, "_launcher", recorder)
    M, N, K, G = 20, 24, 32, 3
    a = torch.randn(M * K + 1, dtype=torch.float16)[1:].view(M, K)  # 2 bytes off a 16-byte boundary
    b = torch.randn(G, N, K, dtype=torch.float16).transpose(-1, -2)  # K-major (G, K, N)
    offs = torch.tensor([5, 5, 17], dtype=torch.int32)
    bias, router = torch.randn(G, N, dtype=torch.float16), torch.rand(M)
    out = torch.full((M, N), float("nan"), dtype=torch.float16)
    module.gb_guards(a, b, offs, bias, router, out=out)
    ((la, lb, loffs, lbias, lrouter, lout, ctas),) = recorder.calls
    assert la.data_ptr() % 16 == 0 and torch.equal(la, a) and la.data_ptr() != a.data_ptr()
    assert lb.data_ptr() == b.data_ptr() and loffs is offs and lout is out and ctas == 148
    assert torch.equal(lbias, bias) and torch.equal(lrouter, router)
