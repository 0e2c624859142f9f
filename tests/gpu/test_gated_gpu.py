"""The gated epilogue (SwiGLU, GeGLU) on the GPU, in bf16 (the CPU interpreter is wrong for bf16): the shipped
`mlp_up_swiglu_bf16` (dense) and `moe_gate_up_swiglu_bf16` (grouped) against the float64 reference with their
outputs NaN-poisoned, their decode variants included, and against their bench peers (x @ W then
act(h[..., :N]) * h[..., N:]; torch._grouped_mm then the same); and both layouts in every Triton kernel form
(TMA and pointer loads, persistent, batched; the grouped kernel's TMA and pointer loads) through the kinds' shared
numerics tests (specgen/kinds/*/testing/numerics.py), rendered for triton:sm90.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them (`pytest tests/gpu -m gpu`).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from backends.triton.variants import VARIANTS as CPU_VARIANTS
from kernels import load_target_module

from gpu.test_numerics_gpu import GpuNumerics, gpu_modules, only  # noqa: F401 (gpu_modules: the fixture GpuNumerics reads)
from specgen.kinds.gemm.testing.reference import REFERENCES
from specgen.kinds.grouped.testing.numerics import GroupedNumericsTests
from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES, grouped
from specgen.kinds.grouped.testing.specs import FORMS

pytestmark = pytest.mark.gpu

DENSE, MOE = "mlp_up_swiglu_bf16", "moe_gate_up_swiglu_bf16"
# (M, N, K): M = 1 and 40 (the decode variant, M <= 64), tails on every dim, a large square; N and K multiples of 8
DENSE_SHAPES = [(1, 256, 512), (40, 136, 1040), (200, 144, 96), (517, 264, 1040), (3000, 2048, 2064)]


def _bf16(spec: dict, suffix: str) -> dict:
    """A CPU test spec (f16 for the interpreter) in bf16 on triton:sm90, renamed for its own custom op."""
    spec = json.loads(json.dumps(spec))
    for side in ("a", "b", "out"):
        if spec[side]["dtype"] == "f16":
            spec[side]["dtype"] = "bf16"
    for op in spec["epilogue"]:
        if op.get("dtype") == "f16":
            op["dtype"] = "bf16"
    spec["name"] += suffix
    return only(spec, "triton:sm90") if spec["kind"] == "gemm" else {**spec, "targets": ["triton:sm90"]}


def _swiglu(h: torch.Tensor, layout: str = "halves") -> torch.Tensor:
    """The eager SwiGLU over a GEMM's 2N columns: gate then up (halves), or gate j at 2j, up j at 2j + 1."""
    if layout == "interleaved":
        return F.silu(h[..., 0::2]) * h[..., 1::2]
    n = h.shape[-1] // 2
    return F.silu(h[..., :n]) * h[..., n:]


# --- the shipped dense kernel -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", DENSE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_shipped_mlp_up_matches_float64_and_the_eager_mlp(shape: tuple[int, int, int]) -> None:
    mod = importlib.import_module(f"generated.triton.{DENSE}")
    fn = getattr(mod, DENSE)
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    x = torch.randn(M, K, generator=gen, device="cuda").to(torch.bfloat16)
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).to(torch.bfloat16)  # cat([w_gate, w_up])
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = fn(x, w.t(), out=out)
    torch.cuda.synchronize()
    assert got is out and not out.isnan().any(), "output elements never written"
    ref = REFERENCES["gemm"](mod.SPEC["epilogue"], x.double(), w.t().double(), {})
    scale = ref.abs().max().item() + 1.0
    err = (out.double() - ref).abs().max().item()
    assert err <= 2e-2 * scale, f"{shape}: max |err| {err:.4g}"
    peer = _swiglu(x @ w.t())  # the bench peer: eager torch over cuBLAS's (M, 2N)
    assert (out.float() - peer.float()).abs().max().item() <= 3e-2 * scale
    assert torch.equal(fn(x, w.t()), out)  # the direct-launch path: the same bits


# --- every Triton kernel form, both layouts (the CPU numerics' gated specs, in bf16) ------------------------
class TestGatedTritonGpuNumerics(GpuNumerics):
    VARIANTS = {k: _bf16(s, "_gpu") for k, s in CPU_VARIANTS.items() if k.startswith("x_gated_") and "f16acc" not in k}


# --- the shipped grouped kernel -----------------------------------------------------------------------------
N, K, TAIL = 200, 328, 17  # N and K past whole tiles (128x128x64, the decode variant's 64x64x128)
SIZES = {**{c: RAGGED_SIZES[c] for c in ("odd", "first_middle_last_empty", "all_empty", "shared_tiles")},
         "decode_variant": DECODE_SIZES}


@pytest.mark.parametrize("case", list(SIZES))
def test_shipped_moe_gate_up_matches_float64_and_grouped_mm(case: str) -> None:
    mod = importlib.import_module(f"generated.triton.{MOE}")
    sizes = SIZES[case]
    gen = torch.Generator(device="cuda").manual_seed(41)
    g, m = len(sizes), sum(sizes) + TAIL
    a = torch.randn(m, K, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.randn(g, 2 * N, K, device="cuda", generator=gen) / K**0.5).to(torch.bfloat16)
    b = w.transpose(-2, -1)  # (G, K, 2N), K-major
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)
    out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    getattr(mod, MOE)(a, b, offs, out=out)
    torch.cuda.synchronize()
    want, written = grouped(mod.SPEC, a, b, offs, {})
    got = out.cpu().double()
    assert not got[written].isnan().any() and got[~written].isnan().all(), "rows written wrongly"
    err = (got[written] - want[written]).abs()
    assert bool((err <= 2e-2 + 2e-2 * want[written].abs()).all()), f"{case}: max error {err.max().item():.4g}"
    rows = int(offs[-1]) if sizes else 0
    if rows and hasattr(torch, "_grouped_mm"):
        layout = next(op["layout"] for op in mod.SPEC["epilogue"] if op["op"] == "gated")
        peer = _swiglu(torch._grouped_mm(a, b, offs=offs)[:rows].float(), layout)
        assert (out[:rows].float() - peer).abs().max().item() <= 3e-2 * (1 + peer.abs().max().item())


class TestGatedGroupedGpuNumerics(GroupedNumericsTests):
    SPECS = {k: _bf16(s, "_gpu") for k, s in FORMS.items() if k.startswith("g_gated_") and "acc16" not in k
             and s["a"]["dtype"] == "f16"}
    DEVICE = "cuda"

    @pytest.fixture(scope="class")
    def module(self, tmp_path_factory):
        folder, cache = tmp_path_factory.mktemp("gated_grouped_gpu"), {}

        def get(spec: dict):
            if spec["name"] not in cache:
                cache[spec["name"]] = load_target_module(spec, "triton:sm90", Path(folder), "_specgen_gated_gpu_")[0]
            return cache[spec["name"]]

        return get
