"""The CuTe sm90 backward's plan and rendering on this CPU machine (no compile: tests/backends/cute/test_cute_compile.py
compiles the catalogue kernel's backward GEMMs and columns kernel for sm_90a; numerics run on the GPU:
tests/gpu/test_training_cute_gpu.py): each role's orientation (the gradient in its operand's stored layout), the
configs the module bakes (the companions' tile and SMEM, the forward's persistent schedule), the kernels each save
mode renders, and a render that skipped check refusing what TRN001 refuses."""

from __future__ import annotations

import copy
import json

import pytest
from kernels import MINIMAL_SPEC

from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target

TARGET = parse_target("cute:sm90")


def loaded(save: str = "preact", act: str = "gelu_tanh", bias: bool = True, a: str = "k", b: str = "k", **more):
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update({"a": {"dtype": "bf16", "major": a}, "b": {"dtype": "bf16", "major": b}, "targets": ["cute:sm90"],
              "epilogue": ([{"op": "bias"}] if bias else []) + ([{"op": "activation", "fn": act}] if act else []),
              "training": {"save": save, "dgrad": {"tile": {"m": 128, "n": 64, "k": 64}}},
              "schedule": {"persistent": True}, **more})
    (ls,) = load_text(json.dumps({"kernels": [d]}), "<test>", ".json")
    return ls


def plan(ls):
    return DESIGN.plan(ls, [TARGET], {"cute:sm90": resolve(ls.spec, TARGET)}).training


@pytest.mark.parametrize(("a", "b", "dgrad", "wgrad"), [
    # (X, Y, X's major, Y's major, transposed) of dgrad and wgrad
    ("k", "k", ("g", "b.t()", "k", "mn", False), ("g.t()", "a", "mn", "mn", True)),  # nn.Linear: x, w.t()
    ("k", "mn", ("g", "b.t()", "k", "k", False), ("a.t()", "g", "mn", "mn", False)),
    ("mn", "k", ("b", "g.t()", "mn", "k", True), ("g.t()", "a", "mn", "k", True)),
    ("mn", "mn", ("b", "g.t()", "k", "k", True), ("a.t()", "g", "k", "mn", False)),
])
def test_each_gradient_comes_back_in_its_operands_layout(a: str, b: str, dgrad: tuple, wgrad: tuple) -> None:
    t = plan(loaded(a=a, b=b))
    for role, want in (("dgrad", dgrad), ("wgrad", wgrad)):
        g = t.gemms[role]
        assert (g.x, g.y, g.a_major, g.b_major, g.transposed) == want, role
    assert (t.gemms["forward_pre"].a_major, t.gemms["forward_pre"].b_major) == (a, b)


def test_the_configs_are_the_companions_with_the_forwards_schedule() -> None:
    ls = loaded()
    r = resolve(ls.spec, TARGET)
    t = plan(ls)
    by_role = {c.companion: c for c in r.companions}
    assert list(t.gemms) == ["forward_pre", "dgrad", "wgrad"]
    for role, g in t.gemms.items():
        c = by_role[role]
        assert (g.config.tile_m, g.config.tile_n, g.config.tile_k) == (c.spec.tile.m, c.spec.tile.n, c.spec.tile.k)
        assert g.config.smem_bytes == c.budget.total and g.config.ab_stages == c.ab_stages
        assert g.config.persistent and g.config.index is None
    assert (t.gemms["dgrad"].config.tile_m, t.gemms["dgrad"].config.tile_n) == (128, 64)  # training.dgrad.tile


@pytest.mark.parametrize(("save", "act", "bias", "roles", "cols"), [
    ("preact", "silu", True, ["forward_pre", "dgrad", "wgrad"], ("grad_cols", "grad_cols_bands")),
    ("recompute", "relu", True, ["recompute", "dgrad", "wgrad"], ("grad_cols_sum", "grad_cols_bands")),
    ("recompute", "sigmoid", False, ["recompute", "dgrad", "wgrad"], ()),
    ("preact", "", True, ["dgrad", "wgrad"], ("grad_cols_sum", "grad_cols_bands")),  # no activation: G = dOut
    ("preact", "", False, ["dgrad", "wgrad"], ()),
])
def test_each_mode_renders_its_kernels(save: str, act: str, bias: bool, roles: list, cols: tuple) -> None:
    ls = loaded(save, act, bias)
    ((_, text),) = render_modules(ls, [TARGET]).items()
    compile(text, "<rendered>", "exec")
    assert list(plan(ls).gemms) == roles
    configs = text[text.index("TRAIN_CONFIGS = {"):text.index("\n}\n", text.index("TRAIN_CONFIGS = {"))]
    assert [line.split('"')[1] for line in configs.splitlines() if line.startswith('    "')] == roles
    assert ("_cols_launcher = " in text) == bool(cols)
    if cols:
        assert f"configs=({', '.join(json.dumps(c) for c in cols)}{',' if len(cols) == 1 else ''}))" in text
    assert "register_backward(" in text and ("_train_op = " in text) == (save == "preact" and bool(act))


def test_a_render_that_skipped_check_refuses_what_trn001_refuses() -> None:
    ls = loaded(out={"dtype": "f32"})
    with pytest.raises(ValueError, match="TRN001"):
        plan(ls)


def test_forward_pre_stages_pre_beside_out_in_smem_and_the_plan_counts_it() -> None:
    """forward_pre stores pre's subtiles by TMA beside out's: its companion (resolved, ruled by SMEM001) has twice the
    forward's epilogue stages (a pair of subtiles in flight per stage of the forward's), and its SMEM one more set of
    subtiles than the same GEMM without pre; recompute, dgrad and wgrad keep the forward's epilogue (recompute beside
    its dOut ring: tests/backends/cute/test_cute_training_dout.py)."""
    for save, role in (("preact", "forward_pre"), ("recompute", "recompute")):
        ls = loaded(save)
        r = resolve(ls.spec, TARGET)
        t = plan(ls)
        fwd, c = DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).config, t.gemms[role].config
        subtile = c.epi_m * c.epi_n * 2  # bf16
        assert c.epi_stages == fwd.epi_stages * (2 if role == "forward_pre" else 1), role
        assert c.smem_bytes - fwd.smem_bytes == (fwd.epi_stages * subtile if role == "forward_pre" else c.dout_stages * subtile), role
        by_role = {x.companion: x for x in r.companions}
        assert c.smem_bytes == by_role[role].budget.total  # what SMEM001 checks
        assert all(t.gemms[x].config.epi_stages == fwd.epi_stages for x in ("dgrad", "wgrad"))


def test_the_columns_pass_reads_rows_in_place_only_where_whole_vectors_are_readable() -> None:
    """vector_rows: the columns kernel reads 8 bf16 (16 bytes) at a time along a row, so a matrix is read in place
    where its base and row pitch are 16-byte aligned and its last row's last vector stays inside its storage; else
    it is copied once into padded rows (values kept)."""
    import torch

    from specgen.runtime.torch.training import vector_rows

    whole = torch.randn(5, 16).bfloat16()
    assert vector_rows(whole, 8) is whole
    padded = torch.randn(5, 16).bfloat16()[:, :13]  # 16-byte pitch, storage past column 13 on every row
    assert vector_rows(padded, 8) is padded
    short = torch.randn(4 * 16 + 13).bfloat16().as_strided((5, 13), (16, 1))  # the last row ends at the storage
    odd = torch.randn(5, 13).bfloat16()  # a 26-byte pitch
    for t in (short, odd):
        got = vector_rows(t, 8)
        assert got is not t and torch.equal(got, t) and got.stride() == (16, 1), t.stride()


@pytest.mark.parametrize(("save", "act", "bias", "a", "b", "calls"), [
    ("preact", "gelu_tanh", True, "k", "k", ["forward_pre", "grad_cols", "dgrad", "wgrad", "grad_cols_bands"]),
    ("recompute", "relu", False, "k", "mn", ["recompute", "dgrad", "wgrad"]),
    ("preact", "", True, "mn", "mn", ["dgrad", "wgrad", "grad_cols_sum", "grad_cols_bands"]),
])
def test_the_jax_entry_is_a_custom_vjp_whose_backward_calls_the_modules_kernels(save, act, bias, a, b, calls, tmp_path):
    """jax.grad under jax.jit of `<name>_jax` traces on any machine (the calls' abstract values; their CUDA lowering
    compiles): one XLA call per backward kernel the torch side runs, each gradient in its operand's stored layout
    and dtype; an odd M, N and K (the calls run on arrays padded to 16-byte rows, the gradients sliced back)."""
    import jax
    import jax.numpy as jnp
    from kernels import load_target_module

    from specgen.kinds.gemm.testing.autograd import cute_train_calls

    spec = json.loads(json.dumps(loaded(save, act, bias, a, b).spec.model_dump(mode="json", exclude_defaults=True)))
    mod, _ = load_target_module({**spec, "name": f"jaxvjp_{save}_{act or 'none'}"}, "cute:sm90", tmp_path)
    fn = getattr(mod, f"jaxvjp_{save}_{act or 'none'}_jax")
    M, N, K = 37, 100, 75
    args = [jax.ShapeDtypeStruct((M, K) if a == "k" else (K, M), jnp.bfloat16),
            jax.ShapeDtypeStruct((N, K) if b == "k" else (K, N), jnp.bfloat16)] + ([jax.ShapeDtypeStruct((N,), jnp.float32)] if bias else [])  # bias: f32 (the spec's default)
    grad = jax.jit(jax.grad(lambda *xs: fn(*xs).astype(jnp.float32).sum(), argnums=tuple(range(len(args)))))
    jaxpr = jax.make_jaxpr(grad)(*args)
    assert [(v.aval.shape, v.aval.dtype) for v in jaxpr.jaxpr.outvars] == [(x.shape, x.dtype) for x in args]
    assert cute_train_calls(jaxpr.jaxpr) == calls


def test_a_roles_schedule_is_its_own_and_the_module_renders_ping_pong_for_it() -> None:
    # training.pre.schedule = "pingpong": the recompute GEMM alone runs ping-pong (a whole 128x128 tile per warpgroup,
    # its epilogue under the other's mainloop); the forward, dgrad and wgrad keep the forward's cooperative schedule,
    # and the module renders the ping-pong code (its order barriers) for that one row
    pre = {"tile": {"m": 128, "n": 128, "k": 64}, "schedule": "pingpong"}
    ls = loaded(save="recompute", training={"save": "recompute", "pre": pre})
    t = plan(ls)
    assert {role: g.config.pingpong for role, g in t.gemms.items()} == {"recompute": True, "dgrad": False, "wgrad": False}
    assert t.gemms["recompute"].config.mma_warpgroups == 1  # one warpgroup a tile, two of them in turn
    ((_, text),) = render_modules(ls, ls.spec.targets).items()
    assert "mma_order" in text and "pingpong=True, group_m" in text
    ((_, before),) = render_modules(loaded(save="recompute"), ["cute:sm90"]).items()
    assert "mma_order" not in before  # without it no row runs ping-pong: nothing of it rendered
