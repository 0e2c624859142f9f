"""The grouped CuTe sm90 design's ragged K (groups.ragged = "k", the weight gradient: out[g] = a[:, K of g] @ b[K of
g], out (G, M, N); templates/grouped/cute/ragged_k_sm90.jinja) on the CPU: both CUTE_RAGGED_K_FORMS (M- and N-major
operands on two warpgroups with a per-group bias and a chain; K-major ones, the sizes index, f32 out on one) check
clean, render their layouts and the boundary tile's SMEM zeroing, and compile for sm_90a through `cute.compile` over
fake tensors with exactly the plan's SMEM, TMA loads of A and B (UTMALDG), wgmma, out stored by TMA (UTMASTG, no
STG: the dense kernel's store over out's (M, N, G) view, not the ragged-M kernel's predicated vector stores) and no
spills (one compile per form, shared by the assertions); the launcher (its compiled function replaced by a recorder:
no GPU here) writes nothing for G = 0 and multiplies zeros of K = 16 for K = 0; the guards name out's (G, M, N)
shape. The numerics run on the GPU: tests/gpu/test_grouped_cute_ragged_k_gpu.py."""

from __future__ import annotations

import json
import os

import pytest

from specgen.check import check_all
from specgen.kinds.grouped.testing.specs import CUTE_RAGGED_K_FORMS
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _load(name: str):
    (ls,) = load_text(json.dumps({"kernels": [CUTE_RAGGED_K_FORMS[name]]}), f"<test:{name}>", ".json")
    return ls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[object, str]]:
    """Each form's module, rendered and imported once: name -> (module, text)."""
    from specgen.compile import load_rendered

    out = {}
    root = tmp_path_factory.mktemp("cute_ragged_k")
    for name in CUTE_RAGGED_K_FORMS:
        ((rel, text),) = render_modules(_load(name), _load(name).spec.targets).items()
        assert rel == f"cute/{name}.py"
        path = root / f"{name}.py"
        path.write_text(text)
        out[name] = (load_rendered(path, f"_specgen_test_cute_k_{name}"), text)
    return out


@pytest.mark.parametrize("name", sorted(CUTE_RAGGED_K_FORMS))
def test_each_form_checks_clean_and_compiles_with_tma_loads_and_stores_and_the_plans_smem(name, rendered, monkeypatch, tmp_path):
    """(The catalogue's moe_wgrad_bf16, M- and N-major with no epilogue, compiles in tests/backends/cute/
    test_cute_compile.py's whole-catalogue test too.)"""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS, compile_config

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    ls = _load(name)
    assert [d for d in check_all([ls]) if d.severity in ("error", "warning")] == []
    module = rendered[name][0]
    plan_smem = module.METADATA["plan"][90]["smem_bytes"]
    r = compile_config(module._launcher, name, None, target_info("cute:sm90"), plan_smem, True, False, ops=(*SASS_OPS, "STG"))
    assert not r.error, r
    assert r.compiler_smem == r.plan_smem == resolve(ls.spec, ls.spec.targets[0]).budget.total <= 232448, r
    # out's subtiles leave SMEM by TMA (UTMASTG), not by the ragged-M kernel's predicated vector stores: the kernel
    # has no STG at all (nothing else it writes lives in global memory)
    assert r.sass["UTMALDG"] > 0 and r.sass["HGMMA"] > 0 and r.sass["UTMASTG"] > 0 and r.sass["STG"] == 0, r.sass
    assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass


def test_the_module_renders_its_majors_groups_and_the_boundary_tiles_zeroing(rendered):
    module, text = rendered["cgk_offs_mn_mn"]
    assert 'A_LAYOUT = LayoutEnum.COL_MAJOR  # spec: a.major = "mn"' in text
    assert 'B_LAYOUT = LayoutEnum.COL_MAJOR  # spec: b.major = "mn"' in text
    assert "out[g] = epilogue(a[:, K of group g] @ b[K of g])" in text and "(G, M, N) bf16, row-major" in text
    assert "cute.domain_offset((0, start, 0), mA)" in text and "cute.domain_offset((0, start, 0), mB)" in text
    body = text.split("hi = cutlass.min(k_len - k * cfg.tile_k, cfg.tile_k)")[1].split("cute.gemm(")[0]
    assert body.index("= A_DTYPE(0.0)") < body.index("= B_DTYPE(0.0)") < body.index('fence_proxy("async.shared"') < \
        body.index("zero_barrier.arrive_and_wait()")
    assert "K_ALIGN" not in text and "lead" not in body  # M- and N-major: boxes start at any row of K
    assert module.METADATA["groups"] == {"index": "offs", "tail": "untouched", "ragged": "k"}
    # out's subtiles by TMA over its (M, N, G) view (the dense kernel's store macros), no predicated vector store
    assert "CopyBulkTensorTileS2GOp(), mOut" in text and "(out.shape[1], out.shape[2], out.shape[0])" in text
    assert "bSG_g[(None, sub_crd)]" in text and "store_pipe.producer_tail()" in text and "s2g" not in text
    _, text_k = rendered["cgk_sizes_k_k"]
    assert 'A_LAYOUT = LayoutEnum.ROW_MAJOR  # spec: a.major = "k"' in text_k
    assert 'B_LAYOUT = LayoutEnum.ROW_MAJOR  # spec: b.major = "k"' in text_k
    assert "end = start + mIndex[g]" in text_k  # the sizes index: the cursor sums them
    # K-major (f16): a group's K tiles start at the 16-byte boundary at or before its first row (a TMA box starting
    # mid-16 bytes faulted on the GPU), the previous group's rows in the first tile zeroed as the next's in the last
    assert "K_ALIGN = 8 " in text_k and "base = start - start % K_ALIGN" in text_k
    assert "cute.domain_offset((0, base, 0), mA)" in text_k and "cute.domain_offset((0, base, 0), mB)" in text_k
    body_k = text_k.split("hi = cutlass.min(k_len - k * cfg.tile_k, cfg.tile_k)")[1].split("cute.gemm(")[0]
    assert "lo = lead" in body_k and body_k.count("= A_DTYPE(0.0)") == 2 and body_k.count("= B_DTYPE(0.0)") == 2


M_OUT, N_OUT = 24, 40


def _operands(spec: dict, k: int):
    import torch

    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[spec["a"]["dtype"]]
    a = torch.zeros(M_OUT, k, dtype=dt) if spec["a"]["major"] == "k" else torch.zeros(k, M_OUT, dtype=dt).t()
    b = torch.zeros(k, N_OUT, dtype=dt) if spec["b"]["major"] == "mn" else torch.zeros(N_OUT, k, dtype=dt).t()
    return a, b


@pytest.mark.parametrize("name", sorted(CUTE_RAGGED_K_FORMS))
def test_the_launcher_skips_g_0_and_multiplies_zeros_for_k_0(name, rendered, monkeypatch):
    import torch

    module, _ = rendered[name]
    spec = CUTE_RAGGED_K_FORMS[name]
    launched = []

    def entry(device, variant, cfg):
        return (lambda *args: launched.append(args)), 132

    monkeypatch.setattr(module._launcher, "entry", entry)
    fn = getattr(module, name)
    scalars = [0.5] if spec["epilogue"] else []

    def bias(g: int) -> list:
        return [torch.zeros(g, N_OUT, dtype=torch.bfloat16)] if spec["epilogue"] else []

    none = fn(*_operands(spec, 16), torch.zeros(0, dtype=torch.int32), *bias(0), *scalars)
    assert none.shape == (0, M_OUT, N_OUT) and launched == []  # G = 0: nothing to write, no launch
    fn(*_operands(spec, 0), torch.zeros(3, dtype=torch.int32), *bias(3), *scalars)
    ((a0, b0, *rest),) = launched
    assert a0.shape == (M_OUT, 16) and b0.shape == (16, N_OUT) and not a0.any() and not b0.any()
    assert (a0.stride(1) == 1) == (spec["a"]["major"] == "k") and (b0.stride(0) == 1) == (spec["b"]["major"] == "k")
    assert rest[-2].shape == (3, M_OUT, N_OUT)  # out, then the CTA count
    dt = torch.float32 if spec["out"]["dtype"] == "f32" else torch.bfloat16
    with pytest.raises(ValueError, match=r"must have shape \(3, 24, 40\)"):
        fn(*_operands(spec, 16), torch.tensor([4, 8, 16], dtype=torch.int32), *bias(3), *scalars,
           out=torch.empty(3, N_OUT, M_OUT, dtype=dt))
