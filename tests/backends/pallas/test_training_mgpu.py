"""Training (a spec's `training` section, issue 38) on the Mosaic GPU target (pallas:gpu_sm90), on this CPU machine:
the module's JAX entry is a jax.custom_vjp whose backward runs the module's wgmma kernel traced per role (the
companion's checked tile and stages, the role's operand majors, a transposed store where the gradient's layout is its
product's transpose). Here: the plan (each role's orientation and Config equal to what check resolved), the check side
(a backward tile past SMEM is SMEM001 on "backward dgrad"; TRN001 refusals, both sides in tests/backends/pallas/
rule_cases.py), a render that skipped check refusing what has no backward, and jax 0.10.2's Mosaic GPU lowering for
CUDA (which runs in Python here): jax.grad under jax.jit of the entry lowers for every covered major pair and both save
modes, and `specgen compile`'s hook lowers each role's kernel to exactly its plan SMEM. Numerics run on a Hopper GPU
(tests/gpu/test_training_mgpu_gpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from backends.pallas.test_mgpu_module import render
from specgen.check import check_specs
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.compile import compile_module
from specgen.kinds.gemm.designs.pallas.design import mgpu_config
from specgen.kinds.gemm.spec import GemmSpec
from specgen.resolve import resolve
from specgen.spec.load import load_paths, load_text
from specgen.targets import target_info

ROOT = Path(__file__).resolve().parents[3]

# name: (activation, bias, save, a major, b major, tiles): every role in both orientations over three modules; the
# first is the catalogue's (specs/training.toml), imported from generated/
CATALOGUE = "linear_gelu_train_mgpu"
FORMS = {
    CATALOGUE: ("gelu_tanh", True, "preact", "k", "k", {}),
    "mgt_silu_rec": ("silu", True, "recompute", "mn", "k", {"pre": {"tile": {"m": 128, "n": 128, "k": 64}}}),
    "mgt_plain": ("", False, "preact", "mn", "mn", {"dgrad": {"tile": {"m": 64, "n": 128, "k": 64}, "ab_stages": 3}}),
}


def form_spec(name: str) -> dict:
    act, bias, save, a, b, tiles = FORMS[name]
    epilogue = ([{"op": "bias", "along": "n", "dtype": "bf16"}] if bias else []) + ([{"op": "activation", "fn": act}] if act else [])
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b},
            "out": {"dtype": "bf16"}, "epilogue": epilogue, "training": {"save": save, **tiles},
            "tile": {"m": 128, "n": 256, "k": 64}, "schedule": {"persistent": True, "group_m": 8},
            "targets": ["pallas:gpu_sm90"]}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("mgpu_train")
    out = {name: render(form_spec(name), tmp) for name in FORMS if name != CATALOGUE}
    (loaded,) = [ls for ls in load_paths([ROOT / "specs" / "training.toml"]) if ls.name == CATALOGUE]
    mod = load_rendered(ROOT / "generated" / "pallas" / "gpu_sm90" / f"{CATALOGUE}.py", f"_mgpu_train_{CATALOGUE}")
    return {CATALOGUE: (mod, resolve(loaded.spec, loaded.spec.targets[0])), **out}


def test_the_catalogue_kernel_is_the_form_the_gpu_ran() -> None:
    """linear_gelu_train_mgpu is the spec tests/gpu/test_training_mgpu_gpu.py's gelu_tanh preact case and
    bench/train_step_jax.py render (the same config: what the H200 ran and timed)."""
    (loaded,) = [ls for ls in load_paths([ROOT / "specs" / "training.toml"]) if ls.name == CATALOGUE]
    want = GemmSpec.model_validate(form_spec(CATALOGUE)).model_dump(mode="json")
    got = loaded.spec.model_dump(mode="json")
    assert {k: v for k, v in got.items() if k != "description"} == {k: v for k, v in want.items() if k != "description"}


def test_each_role_runs_the_config_check_resolved_in_its_orientation(modules) -> None:
    """TRAIN_GEMMS: each companion's resolved Config (tile, stages, swizzles, SMEM), the forward's schedule, the
    role's stored majors, and a transposed store exactly where the gradient's layout is its product's transpose."""
    want_orient = {  # (x_k, y_k, transposed) by form and role
        CATALOGUE: {"forward_pre": (True, True, False), "dgrad": (True, False, False), "wgrad": (False, False, True)},
        "mgt_silu_rec": {"recompute": (False, True, False), "dgrad": (True, False, True), "wgrad": (True, False, True)},
        "mgt_plain": {"dgrad": (True, True, True), "wgrad": (True, False, False)},
    }
    for name, (mod, resolved) in modules.items():
        assert set(mod.TRAIN_GEMMS) == set(want_orient[name]) == {c.companion for c in resolved.companions}
        for c in resolved.companions:
            cfg, x_k, y_k, transposed, dtype = mod.TRAIN_GEMMS[c.companion]
            want = mgpu_config(c)
            assert (x_k, y_k, transposed) == want_orient[name][c.companion], (name, c.companion)
            assert dtype == jnp.bfloat16
            for field in ("tile_m", "tile_n", "tile_k", "wg_n", "epi_m", "epi_n", "out_slots", "a_swizzle", "b_swizzle",
                          "out_swizzle", "smem_bytes"):
                assert getattr(cfg, field) == getattr(want, field), (name, c.companion, field)
            assert cfg.stages == c.ab_stages and cfg.persistent and not cfg.swap_ab
            meta = mod.METADATA["training"]["gemms"][c.companion]
            # recompute's dOut is TMA-loaded through the staging slots, one mbarrier each: its companion's chain holds
            # dOut as a residual, so the companion's SMEM counts them (2 x out_slots x 8 B) and the plan adds nothing
            assert meta["smem_bytes"] == c.budget.total <= c.budget.capacity
            assert cfg.residual_barriers == (2 * cfg.out_slots if c.companion == "recompute" else 0)
    assert modules["mgt_plain"][0].TRAIN_GEMMS["dgrad"][0][:4] == (64, 128, 64, 3)


def test_compile_lowers_each_role_to_its_plan_smem(modules) -> None:
    """`specgen compile`'s hook lowers the forward's config and every backward GEMM for CUDA on this CPU machine (jax
    0.10.2's Mosaic GPU lowering: TMA, wgmma on the MN-major operands as stored, the transposed stores, the
    epilogues), each to exactly the SMEM its plan says."""
    info = target_info("pallas:gpu_sm90")
    for name, (mod, _) in modules.items():
        rows = compile_module(mod, info)
        assert [r.kernel for r in rows] == [name, *(f"{name}[{role}]" for role in mod.TRAIN_GEMMS)]
        for r in rows:
            assert not r.error and r.compiler_smem == r.plan_smem, (r.kernel, r.error, r.compiler_smem, r.plan_smem)


def test_grad_under_jit_lowers_with_every_role(modules) -> None:
    """jax.grad of the entry's call under jax.jit traces the custom_vjp (forward rule, then backward rule) and lowers
    for CUDA over an odd shape each (M, N, K off every tile; M = 1 and N under one tile), each role's kernel in the
    program."""
    for (name, (mod, _)), shape in zip(modules.items(), ((300, 520, 200), (1, 48, 40), (37, 200, 72)), strict=True):
        spec = form_spec(name)
        for M, N, K in (shape,):
            a = jax.ShapeDtypeStruct((M, K) if spec["a"]["major"] == "k" else (K, M), jnp.bfloat16)
            b = jax.ShapeDtypeStruct((N, K) if spec["b"]["major"] == "k" else (K, N), jnp.bfloat16)
            args = [a, b, *([jax.ShapeDtypeStruct((N,), jnp.bfloat16)] if spec["epilogue"] and spec["epilogue"][0]["op"] == "bias" else [])]
            loss = lambda *xs, mod=mod: jnp.sum(mod._call(*xs).astype(jnp.float32))  # noqa: E731
            grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
            text = grads.trace(*args).lower(lowering_platforms=("cuda",)).as_text()
            for role in mod.TRAIN_GEMMS:
                assert f"{name}_{role}" in text, (name, role)
            assert (f"{name}_grad_cols" in text) == ("forward_pre" in mod.TRAIN_GEMMS and bool(spec["epilogue"]))
            assert [s.shape for s in jax.eval_shape(grads, *args)] == [x.shape for x in args]


def _diagnostics(spec: dict) -> list:
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return check_specs([loaded]).diagnostics


def test_a_backward_tile_is_checked_like_a_gemm() -> None:
    """A dgrad tile whose stages pass SMEM is SMEM001 (and its accumulator REG001) on "backward dgrad"; the forward's
    own config is clean."""
    spec = form_spec(CATALOGUE)
    spec["training"]["dgrad"] = {"tile": {"m": 256, "n": 256, "k": 64}, "ab_stages": 4}
    errors = [d for d in _diagnostics(spec) if d.severity == "error"]
    assert {(d.rule, d.variant) for d in errors} == {("SMEM001", "backward dgrad"), ("REG001", "backward dgrad")}
    smem = next(d for d in errors if d.rule == "SMEM001")
    assert "needs 294976 B of SMEM > 232448 B" in smem.message


def test_a_render_past_check_raises_what_trn001_refuses(tmp_path) -> None:
    """TRN001 refuses a swap_ab forward's backward on Mosaic GPU; the plan refuses what check would, so a render that
    skipped check emits no wrong backward (a gated epilogue's backward is rendered: test_training_mgpu_gated.py)."""
    spec = form_spec(CATALOGUE) | {"pallas": {"swap_ab": True}, "tile": {"m": 64, "n": 128, "k": 64}}
    (trn,) = [d for d in _diagnostics(spec) if d.rule == "TRN001"]
    assert "the Mosaic GPU backward has no swap_ab forward" in trn.message
    with pytest.raises(ValueError, match=r"no swap_ab forward .*\(TRN001\)"):
        render(spec, tmp_path)
    f32 = form_spec("mgt_plain") | {"a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"},
                                   "out": {"dtype": "f32"}}
    with pytest.raises(ValueError, match=r"takes f16 or bf16 operands .*\(TRN001\)"):
        render(f32, tmp_path)


def test_grad_cols_kernel_matches_the_jnp_pass_and_float64(modules) -> None:
    """preact's G and dbias are one pallas_call (Pallas' Triton lowering; no GPU here: Pallas' interpreter runs it):
    G and the bias gradient equal the jnp pass they replaced (the XLA kernels the H200 ran: G in f32 rounded to bf16,
    its f32 column sum) and float64 autograd of gelu_tanh, at M and N off its (64, 128) blocks, M = 1 and N under one
    block (the gradient program of test_grad_under_jit_lowers_with_every_role holds it, lowered for CUDA)."""
    import numpy as np
    import torch

    mod = modules[CATALOGUE][0]
    rng = np.random.default_rng(3)
    for m, n in ((130, 136), (1, 72)):
        grad = jnp.asarray(rng.standard_normal((m, n)), jnp.bfloat16)
        pre = jnp.asarray(3 * rng.standard_normal((m, n)), jnp.bfloat16)
        g, dbias = mod._grad_cols(grad, pre, interpret=True)
        # the jnp pass the kernel replaced, verbatim: G = dOut * gelu_tanh'(pre) in f32 (jax's own derivative here)
        want_g = grad.astype(jnp.float32) * jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=True)))(
            pre.astype(jnp.float32).reshape(-1)).reshape(m, n)
        assert g.dtype == jnp.bfloat16 and dbias.dtype == jnp.float32 and dbias.shape == (n,)
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(want_g.astype(jnp.bfloat16), np.float32),
                                   rtol=2e-2, atol=2e-2)
        np.testing.assert_allclose(np.asarray(dbias), np.asarray(jnp.sum(want_g, axis=0)), rtol=1e-4, atol=1e-3)
        x = torch.from_numpy(np.asarray(pre, np.float64)).requires_grad_()
        torch.nn.functional.gelu(x, approximate="tanh").backward(torch.from_numpy(np.asarray(grad, np.float64)))
        scale = float(x.grad.abs().sum(0).max())  # dbias from f32 G of the same bf16 inputs: f32 rounding only
        assert float(np.abs(np.asarray(dbias, np.float64) - x.grad.sum(0).numpy()).max()) <= 1e-4 * max(scale, 1.0)
    assert mod._grad_cols(jnp.zeros((0, 8), jnp.bfloat16), jnp.zeros((0, 8), jnp.bfloat16))[1].shape == (8,)
