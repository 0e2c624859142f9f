"""Size-selected variants on Mosaic GPU (pallas:gpu_sm90), on a CPU machine: a spec's variants render into
one module (a `Config` row each, the default `CONFIG` after them), whose jitted entry picks the row by the
static shapes when it traces (`_config_for`: the first variant whose bounds hold, in spec order, else the
default); each config is the one check resolved and lowers for CUDA to exactly its plan SMEM; the
catalogue's decode variants likewise; check no longer refuses variants there (CFG003 stays for TPU).
Numerics run on the GPU: tests/gpu/test_pallas_gpu.py (`test_variant_numerics_against_float64`)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from backends.pallas.test_mgpu_module import MGPU, render, structs
from specgen.check import check_spec
from specgen.spec.load import load_text
from specgen.targets import TARGETS

# Two variants beside a clustered 128x256 default: decode (M <= 16) on 64x64 tiles 8 deep, then mid-size
# (M <= 128 and N <= 4096) on 64x128 tiles; a bias vector (padded to the chosen config's tile) and a
# scalar (broadcast to its subtile) ride along.
SPEC = {
    "name": "mgpu_two_variants", "kind": "gemm",
    "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"},
    "epilogue": [{"op": "bias", "along": "n", "dtype": "bf16"}, {"op": "scale", "by": "scalar"}],
    "tile": {"m": 128, "n": 256, "k": 64}, "cluster": {"m": 2, "n": 1},
    "schedule": {"persistent": True, "group_m": 8}, "targets": ["pallas:gpu_sm90"],
    "variants": [
        {"when": {"m_max": 16}, "tile": {"m": 64, "n": 64, "k": 64}, "cluster": {"m": 1, "n": 1},
         "pipeline": {"ab_stages": 8}},
        {"when": {"m_max": 128, "n_max": 4096}, "tile": {"m": 64, "n": 128, "k": 64}, "cluster": {"m": 1, "n": 1},
         "schedule": {"persistent": False, "group_m": 4}, "pipeline": {"ab_stages": 6}},
    ],
}
# Batched, both operands M/N-major, a row scale and a residual (TMA-loaded into the staging slot): a
# variant in a 1x2 cluster (A multicast, column raster) beside an unclustered default, and one bounded on N.
SPEC_BATCHED = {
    "name": "mgpu_batched_variants", "kind": "gemm", "batch": True,
    "a": {"dtype": "f16", "major": "mn"}, "b": {"dtype": "f16", "major": "mn"}, "out": {"dtype": "f16"},
    "epilogue": [{"op": "scale", "by": "row"}, {"op": "residual", "dtype": "f16", "beta": 0.5}],
    "tile": {"m": 128, "n": 128, "k": 64}, "targets": ["pallas:gpu_sm90"],
    "variants": [
        {"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 64}, "cluster": {"m": 1, "n": 2},
         "schedule": {"raster": "along_n", "persistent": True}},
        {"when": {"n_max": 512}, "tile": {"m": 128, "n": 64, "k": 64}, "pipeline": {"ab_stages": 5}},
    ],
}
BATCHED_CHOICES = [((1, 300, 520), 0), ((64, 72, 64), 0), ((65, 512, 100), 1), ((65, 513, 100), None),
                   ((200, 1000, 0), None)]
# (M, N, K) -> the config it runs: None the default, else the variant's index. Both sides of each bound.
CHOICES = [((1, 256, 512), 0), ((16, 8192, 8192), 0), ((17, 256, 512), 1), ((128, 4096, 100), 1),
           ((128, 4097, 100), None), ((129, 64, 64), None), ((16, 4097, 64), 0), ((1000, 100, 1000), None)]


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return render(SPEC, tmp_path_factory.mktemp("variants"))


def test_variants_render_into_one_module_as_check_resolved(two) -> None:
    mod, resolved = two
    assert len(mod.VARIANT_CONFIGS) == len(resolved.variants) == 2
    for cfg, r in zip((mod.CONFIG, *mod.VARIANT_CONFIGS), (resolved, *resolved.variants), strict=True):
        t = r.spec.tile
        assert (cfg.tile_m, cfg.tile_n, cfg.tile_k, cfg.stages) == (t.m, t.n, t.k, r.ab_stages)
        assert (cfg.cluster_m, cfg.cluster_n, cfg.persistent, cfg.group_m) == (
            r.spec.cluster.m, r.spec.cluster.n, r.spec.schedule.persistent, r.spec.schedule.group_m)
        assert cfg.smem_bytes == r.budget.total
    assert mod.VARIANT_CONFIGS[0].stages == 8 and mod.VARIANT_CONFIGS[1].persistent is False
    assert [v["when"] for v in mod.METADATA["variants"]] == [{"m_max": 16}, {"m_max": 128, "n_max": 4096}]
    text = Path(mod.__file__).read_text()
    assert "    if m <= 16:\n        return VARIANT_CONFIGS[0]\n    if m <= 128 and n <= 4096:\n" in text
    assert "0. M <= 16: 64x64x64 tiles, 8 K steps in flight" in text  # the docstring lists each variant


@pytest.mark.parametrize(("shape", "want"), CHOICES, ids=[f"{m}x{n}x{k}" for (m, n, k), _ in CHOICES])
def test_config_for_takes_the_first_variant_whose_bounds_hold(two, shape, want) -> None:
    mod, _ = two
    assert mod._config_for(*shape) == (mod.CONFIG if want is None else mod.VARIANT_CONFIGS[want])


@pytest.mark.parametrize(("shape", "want"), CHOICES, ids=[f"{m}x{n}x{k}" for (m, n, k), _ in CHOICES])
def test_the_traced_entry_builds_the_chosen_config(two, monkeypatch, shape, want) -> None:
    """Tracing the entry (no GPU) builds the kernel of the config `_config_for` picked, with the vector
    padded to that config's tile and the scalar broadcast to its subtile."""
    mod, _ = two
    built: list = []
    real = mod._build

    def spy(cfg, *args):
        built.append(cfg)
        return real(cfg, *args)

    monkeypatch.setattr(mod, "_build", spy)
    M, N, K = shape
    out = jax.eval_shape(mod._launch, *structs(SPEC, M, N, K))
    assert out.shape == (M, N) and out.dtype == jnp.bfloat16
    assert built == [mod.CONFIG if want is None else mod.VARIANT_CONFIGS[want]]


def test_forcing_a_config_overrides_the_bounds(two, monkeypatch) -> None:
    mod, _ = two
    built: list = []
    real = mod._build
    monkeypatch.setattr(mod, "_build", lambda cfg, *a: built.append(cfg) or real(cfg, *a))
    jax.eval_shape(functools.partial(mod._launch, config=mod.VARIANT_CONFIGS[0]), *structs(SPEC, 1000, 300, 200))
    assert built == [mod.VARIANT_CONFIGS[0]]


def test_each_config_lowers_to_its_plan_smem(two) -> None:
    """`specgen compile`'s hook lowers every config for CUDA (each forced) on this CPU machine: Mosaic GPU
    allocates exactly each config's plan SMEM."""
    from specgen.kinds.gemm.designs.pallas.compile import compile_module

    mod, resolved = two
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert [r.variant for r in results] == [None, 0, 1]
    assert {r.kernel for r in results} == {"mgpu_two_variants"}
    for r, want in zip(results, (resolved, *resolved.variants), strict=True):
        assert (r.error, r.compiler_smem, r.plan_smem) == ("", want.budget.total, want.budget.total)


@pytest.mark.parametrize("n", [8, 16, 40, 64, 72])
def test_small_n_keeps_every_tma_index(two, n: int) -> None:
    """The launcher pads N to the chosen config's tile so that the output spans more than one swizzle tile
    (else Mosaic GPU drops the store's column index and every subtile lands on columns 0..): each config
    lowered at small N drops no dynamic TMA index."""
    from grids.mgpu import dropped_tma_indices

    mod, _ = two
    for M in (1, 100, 300):  # variant 0, variant 1, the default
        with dropped_tma_indices() as dropped:
            jax.jit(mod._launch).trace(*structs(SPEC, M, n, 256)).lower(lowering_platforms=("cuda",))
        assert dropped == [], (M, n, mod._config_for(M, n, 256))


def test_batched_clustered_variants_lower_to_their_plan_smem_and_trace(tmp_path) -> None:
    from specgen.kinds.gemm.designs.pallas.compile import compile_module

    assert not [d for d in _errors(SPEC_BATCHED, "") if d.severity == "error"]
    mod, resolved = render(SPEC_BATCHED, tmp_path)
    assert (mod.VARIANT_CONFIGS[0].cluster_n, mod.VARIANT_CONFIGS[0].raster_dim, mod.CONFIG.cluster_n) == (2, 1, 1)
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    for r, want in zip(results, (resolved, *resolved.variants), strict=True):
        assert (r.error, r.compiler_smem) == ("", want.budget.total), r
    for (M, N, K), want in BATCHED_CHOICES:
        assert mod._config_for(M, N, K) == (mod.CONFIG if want is None else mod.VARIANT_CONFIGS[want])
        jax.jit(mod._launch).trace(*structs(SPEC_BATCHED, M, N, K)).lower(lowering_platforms=("cuda",))


# Decode variants for the catalogue's Mosaic GPU kernels, candidates the catalogue does not ship yet: no GPU
# has run them (numerics or speed). Each must lower to its plan SMEM and trace on both sides of its bounds
# here first; the GPU suite's two-variant module checks the numerics of the same kind of config.
DECODE_VARIANTS = [
    {"when": {"m_max": 16}, "tile": {"m": 64, "n": 64, "k": 64}, "pipeline": {"ab_stages": 8}},
    {"when": {"m_max": 128}, "tile": {"m": 64, "n": 128, "k": 64}, "pipeline": {"ab_stages": 6}},
]
CANDIDATES = ["gemm_bf16", "gemm_bias_gelu_bf16", "gemm_fp8_rowwise", "gemm_relu_f16", "gemm_residual_bf16"]


def with_decode_variants(name: str) -> dict:
    spec = json.loads(json.dumps(MGPU[name]))
    variants = json.loads(json.dumps(DECODE_VARIANTS))
    if spec["a"]["dtype"].startswith("fp8"):  # K: one 128-byte swizzle row of fp8
        for v in variants:
            v["tile"]["k"] = 128
    own = spec.setdefault("per_target", {}).setdefault("pallas:gpu_sm90", {})
    if own.get("cluster"):
        for v in variants:  # one tile row at decode sizes: a pair's second CTA would idle
            v["cluster"] = {"m": 1, "n": 1}
    own["variants"] = variants
    return spec


@pytest.mark.parametrize("name", CANDIDATES)
def test_decode_variant_candidates_lower_to_their_plan_smem_and_trace(tmp_path, name: str) -> None:
    from specgen.kinds.gemm.designs.pallas.compile import compile_module

    spec = with_decode_variants(name)
    mod, resolved = render(spec, tmp_path)
    assert len(mod.VARIANT_CONFIGS) == len(resolved.variants) == 2
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    for r, want in zip(results, (resolved, *resolved.variants), strict=True):
        assert (r.error, r.compiler_smem) == ("", want.budget.total), r
    for M in (1, 16, 17, 64, 65, 128, 129):
        cfg = mod._config_for(M, 4096, 4096)
        out = jax.eval_shape(mod._call, *structs(spec, M, 264, 520))
        assert out.shape[-2:] == (M, 264)
        assert cfg.tile_m == (64 if M <= 128 else resolved.spec.tile.m)


def _errors(spec: dict, rule: str) -> list:
    """check's findings of `rule` on the spec (every finding for "")."""
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return [d for d in check_spec(ls) if d.rule == rule or not rule]


def test_check_refuses_variants_on_tpu_only() -> None:
    """CFG003: Mosaic GPU renders variants, so none is refused there; the TPU module renders one config."""
    variants = [{"when": {"m_max": 64}, "tile": {"m": 128, "n": 128, "k": 128}}]
    base = {**SPEC, "epilogue": [], "tile": {"m": 128, "n": 256, "k": 128}, "cluster": {"m": 1, "n": 1},
            "variants": variants}
    assert not _errors({**base, "targets": ["pallas:gpu_sm90"]}, "CFG003")
    (d,) = _errors({**base, "targets": ["pallas:gpu_sm90", "pallas:tpu_v5e"]}, "CFG003")
    assert d.target == "pallas:tpu_v5e" and "pallas/mgpu_two_variants.py" in d.message
    assert "Pallas Mosaic GPU" in d.message
