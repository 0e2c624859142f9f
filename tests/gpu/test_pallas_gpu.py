"""On an H100/H200 with jax[cuda]: the Mosaic GPU SMEM model against live lowerings of JAX's
warp-specialized Hopper matmul (the structure the model describes). specgen renders no Mosaic GPU
kernel yet, so there are no numerics or benchmark of its own here."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.gpu

CONFIGS = [(128, 128, 64, 4), (128, 128, 64, 5), (128, 256, 64, 4), (128, 256, 64, 2), (128, 128, 128, 3)]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_mgpu_smem_model_matches_a_live_lowering(config) -> None:
    import jax
    import jax.numpy as jnp
    from backends.pallas.test_mgpu_smem import model
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    from specgen.envelope.devices import SM90

    tm, tn, tk, steps = config
    want = model(tm, tn, tk, steps)
    cfg = hm.TuningConfig(tile_m=tm, tile_n=tn, tile_k=tk, max_concurrent_steps=steps, epi_tile_m=64, epi_tile_n=64)
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    if want <= SM90.smem_per_block:
        jax.jit(lambda x, y: hm.matmul(x, y, None, cfg)).lower(a, a).compile()
        return
    with pytest.raises(Exception, match=re.escape(f"smem_bytes={want} > max_smem_bytes={SM90.smem_per_block}")):
        jax.jit(lambda x, y: hm.matmul(x, y, None, cfg)).lower(a, a).compile()
