"""Every rendered TPU module lowers for TPU on this CPU machine: `jax.jit(...).lower(lowering_platforms=
("tpu",))` runs Pallas's Mosaic lowering of the kernel (jaxpr -> Mosaic MLIR inside a tpu_custom_call),
which refuses what Mosaic cannot express (it refused 3-deep buffering: rule PAL003). libtpu's own
compile, and so the VMEM the chip would allocate, needs a TPU and is not run."""

from __future__ import annotations

import jax
import pytest

from backends.pallas.common import Data, render_module
from backends.pallas.test_tpu_numerics import VARIANTS
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.targets import TARGETS


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lowers_to_mosaic_for_tpu(variant: str, tmp_path) -> None:
    spec = VARIANTS[variant]
    module = render_module(spec, tmp_path)
    data = Data(spec, 300, 384, 640)  # ragged against every block: masks and edge blocks included
    a, b = data.operands()
    args = [value for _, value in data.epilogue_args()]
    lowered = jax.jit(lambda *xs: module._call(*xs, interpret=False)).trace(a, b, *args).lower(
        lowering_platforms=("tpu",))
    text = lowered.as_text()
    assert "tpu_custom_call" in text and module.NAME in text


def test_the_compile_hook_lowers_and_reports_mosaics_refusal(tmp_path) -> None:
    """`specgen compile`'s hook for Pallas: a module lowers (no compiler figure: libtpu needs a TPU), and
    one that Mosaic refuses (3-deep buffering, which PAL003 stops before render) reports Mosaic's message."""
    good = VARIANTS["gemm_bf16_tpu"]
    r = compile_module(render_module(good, tmp_path), TARGETS["pallas:tpu_v6e"])
    assert (r.kernel, r.target, r.error, r.compiler_smem) == (good["name"], "pallas:tpu_v6e", "", None)
    assert r.plan_smem > 0
    deep = {**good, "name": "deep_buffers", "pipeline": {**good["pipeline"], "ab_stages": 3}}
    r = compile_module(render_module(deep, tmp_path), TARGETS["pallas:tpu_v6e"])
    assert "Only single (1) and double (2) buffering are supported" in r.error, r.error
