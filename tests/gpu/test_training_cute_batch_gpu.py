"""Training with `batch = true` on the dense CuTe sm90 design (issue 38; session 33; docs/training/batched.md, "A batched
GEMM") on a Hopper GPU: specs rendered in the test (bf16, B K-major: each batch's (N, K) weight passed as .mT), the
Triton design's meaning (each backward GEMM per batch, every batch its own B; the bias gradient summed over the
batches and rows). Gradients of A, B and the bias within bf16 rounding of float64 autograd and no worse than twice
eager bf16 autograd's error; both save modes; [], [bias, gelu_tanh], the gated op (SwiGLU halves, GeGLU-tanh
interleaved with a bias), a chain (bias along m, a batched residual, silu, a column scale: their gradients too); batch 5, 3 and 1 (M = 1), M, N and K off the tiles and N off whole 16 bytes;
NaN-poisoned gradient buffers written everywhere; the same bits on a second backward (no atomics).
Written in session 33 without a GPU (passed on an H200 in session 33). Session 34 adds a batched fp8 forward's backward
(`test_batched_fp8_backward`: e4m3 preact, e4m3 x e5m2 recompute; scale_a (M,) and scale_b (N,) shared by the batches):
NOT YET RUN until the lead reports it.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

ACTS = {"silu": F.silu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}
CHAINS = {
    "plain": [],
    "bias_gelu": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
    "swiglu": [{"op": "gated", "fn": "silu", "layout": "halves"}],
    "geglu_il": [{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"}, {"op": "bias", "dtype": "bf16"}],
    "chain": [{"op": "bias", "along": "m", "name": "row_bias"}, {"op": "residual", "dtype": "bf16"},
              {"op": "activation", "fn": "silu"}, {"op": "scale", "by": "col"}],
}
# (chain, save): every chain in one mode, [bias, gelu_tanh] in both (six modules: ~35 CuTe compiles)
FORMS = [("plain", "preact"), ("bias_gelu", "preact"), ("bias_gelu", "recompute"), ("swiglu", "preact"),
         ("geglu_il", "recompute"), ("chain", "preact")]
SHAPES = [(5, 256, 512, 384), (3, 200, 100, 72), (1, 1, 264, 72)]  # batch, M, N, K
_MODULES: dict[str, object] = {}


def spec(chain: str, save: str) -> dict:
    return {"name": f"gpu_ctrb_{chain}_{save}", "kind": "gemm", "batch": True, "a": {"dtype": "bf16", "major": "k"},
            "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}, "epilogue": CHAINS[chain],
            "training": {"save": save}, "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2},
            "schedule": {"persistent": True}, "targets": ["cute:sm90"]}


def module(s: dict, tmp_path_factory):
    if s["name"] not in _MODULES:
        from kernels import load_target_module

        _MODULES[s["name"]] = load_target_module(s, "cute:sm90", tmp_path_factory.mktemp(s["name"]),
                                                 "_specgen_cute_batch_train_")[0]
    return _MODULES[s["name"]]


def data(s: dict, shape: tuple[int, int, int, int], seed: int = 0) -> dict[str, torch.Tensor]:
    batch, M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cols = 2 * N if s["epilogue"] and s["epilogue"][0]["op"] == "gated" else N
    out = {"a": torch.randn(batch, M, K, generator=gen, device="cuda").bfloat16(),
           "b": (torch.randn(batch, cols, K, generator=gen, device="cuda") / K**0.5).bfloat16().mT}
    for op in s["epilogue"]:
        if op["op"] == "bias" and op.get("along") == "m":
            out[op["name"]] = torch.randn(M, generator=gen, device="cuda")  # f32 (the spec's default)
        elif op["op"] == "bias":
            out["bias"] = torch.randn(N, generator=gen, device="cuda").bfloat16()
        elif op["op"] == "residual":
            out["c"] = torch.randn(batch, M, N, generator=gen, device="cuda").bfloat16()
        elif op["op"] == "scale":
            out["col_scale"] = torch.rand(N, generator=gen, device="cuda") + 0.5
    return out


def forward(s: dict, args: dict[str, torch.Tensor]) -> torch.Tensor:
    """The batched op in the leaves' dtype (float64: the reference; bf16: eager, rounded after each op)."""
    v = args["a"] @ args["b"]
    for op in s["epilogue"]:
        if op["op"] == "bias" and op.get("along") == "m":
            v = v + args[op["name"]].to(v.dtype)[:, None]
        elif op["op"] == "bias":
            v = v + args["bias"]
        elif op["op"] == "residual":
            v = v + args["c"]
        elif op["op"] == "scale":
            v = v * args["col_scale"].to(v.dtype)
        elif op["op"] == "activation":
            v = ACTS[op["fn"]](v)
        else:
            n = v.shape[-1] // 2
            gate, up = (v[..., :n], v[..., n:]) if op["layout"] == "halves" else (v[..., 0::2], v[..., 1::2])
            v = ACTS[op["fn"]](gate) * up
    return v


def grads(s: dict, args: dict[str, torch.Tensor], grad: torch.Tensor, dtype) -> dict[str, torch.Tensor]:
    leaves = {n: t.detach().to(dtype).requires_grad_() for n, t in args.items()}
    forward(s, leaves).backward(grad.to(dtype))
    return {n: t.grad for n, t in leaves.items()}


def within(got: torch.Tensor, want: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    e_ours = (got.double() - want).abs().max().item()
    e_eager = (theirs.double() - want).abs().max().item()
    assert e_ours <= 2 * e_eager + 2e-2 * want.abs().max().item(), f"{what}: {e_ours:.4g} vs eager {e_eager:.4g}"


@pytest.mark.parametrize(("chain", "save"), FORMS, ids=[f"{c}-{s}" for c, s in FORMS])
def test_batched_gradients_against_float64(chain: str, save: str, tmp_path_factory) -> None:
    s = spec(chain, save)
    mod = module(s, tmp_path_factory)
    fn = getattr(mod, s["name"])
    for shape in SHAPES:
        args = data(s, shape)
        grad = torch.randn(*shape[:3], device="cuda").bfloat16()
        leaves = {n: t.clone().requires_grad_() for n, t in args.items()}
        fn(*leaves.values()).backward(grad)
        want, theirs = grads(s, args, grad, torch.float64), grads(s, args, grad, torch.bfloat16)
        for n, w in want.items():
            got = leaves[n].grad
            assert got is not None and got.dtype == args[n].dtype and got.shape == args[n].shape, n
            within(got, w, theirs[n], f"{s['name']} d{n} at {shape}")
        pre = mod._forward_pre(*args.values())[1] if hasattr(mod, "_forward_pre") else None
        bufs = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items()}
        got = mod._backward(grad, *args.values(), pre, **bufs)
        again = mod._backward(grad, *args.values(), pre)
        for g, h, (n, w) in zip(got, again, want.items(), strict=True):
            assert not g.isnan().any(), f"d{n} at {shape}: an element was not written"
            within(g, w, theirs[n], f"{s['name']} d{n} (poisoned) at {shape}")
            assert torch.equal(g, h), f"d{n} at {shape}: not the same bits on a second backward"


# A batched fp8 forward (session 34): rowwise scales shared by the batches, then a bias and GELU-tanh; the backward's dA[i]
# and dB[i] are the gradients of the dequantized A[i] scale_a and B[i] scale_b in bf16, the bias's over every batch's rows
FP8_FORMS = {"e4m3_pre": ("fp8_e4m3", "fp8_e4m3", "preact"), "e4m3_e5m2_rec": ("fp8_e4m3", "fp8_e5m2", "recompute")}
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_spec(name: str) -> dict:
    a, b, save = FP8_FORMS[name]
    return {"name": f"gpu_ctrb_fp8_{name}", "kind": "gemm", "batch": True, "a": {"dtype": a, "major": "k"},
            "b": {"dtype": b, "major": "k"}, "out": {"dtype": "bf16"}, "targets": ["cute:sm90"],
            "tile": {"m": 128, "n": 128, "k": 128}, "schedule": {"persistent": True},
            "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                         {"op": "activation", "fn": "gelu_tanh"}], "training": {"save": save}}


@pytest.mark.parametrize("name", list(FP8_FORMS))
def test_batched_fp8_backward(name: str, tmp_path_factory) -> None:
    """The forward within bf16 rounding of float64's; `_backward` into NaN-poisoned buffers: dA, dB (bf16, A's and B's
    layouts: each batch's dB^T stored as its (N, K) weight) and dbias within 2e-2 of the largest float64 gradient of
    gelu_tanh((A[i] sa) @ (B[i] sb) + bias) (the unbatched fp8 GPU test's bound), the scales none; the same bits on a
    second backward into new tensors; K = 72: an fp8 row pitch TMA cannot read in place (copied)."""
    s = fp8_spec(name)
    mod = module(s, tmp_path_factory)
    a_dt, b_dt, save = FP8_FORMS[name]
    for batch, M, N, K in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(batch + M + N + K)
        a = torch.randn(batch, M, K, generator=gen, device="cuda").to(FP8[a_dt])
        b = torch.randn(batch, N, K, generator=gen, device="cuda").to(FP8[b_dt]).mT
        sa = torch.rand(M, generator=gen, device="cuda") / 10 + 0.05
        sb = torch.rand(N, generator=gen, device="cuda") / 10 + 0.05
        bias = torch.randn(N, generator=gen, device="cuda").bfloat16()
        grad = torch.randn(batch, M, N, generator=gen, device="cuda").bfloat16()
        deq_a = (a.double() * sa.double()[:, None]).requires_grad_()
        deq_b = (b.double() * sb.double()[None, :]).requires_grad_()
        bias64 = bias.double().requires_grad_()
        want_out = F.gelu(deq_a @ deq_b + bias64, approximate="tanh")
        want_out.backward(grad.double())
        out = getattr(mod, s["name"])(a, b, sa, sb, bias)
        assert (out.double() - want_out).abs().max().item() <= 2e-2 * want_out.abs().max().item(), (name, "out")
        pre = mod._forward_pre(a, b, sa, sb, bias)[1] if save == "preact" else None
        bufs = {"da": torch.full((batch, M, K), float("nan"), device="cuda").bfloat16(),
                "db": torch.full((batch, N, K), float("nan"), device="cuda").bfloat16().mT,
                "dbias": torch.full((N,), float("nan"), device="cuda").bfloat16()}
        got = mod._backward(grad, a, b, sa, sb, bias, pre, **bufs)
        again = mod._backward(grad, a, b, sa, sb, bias, pre)
        assert got[2].numel() == got[3].numel() == 0  # the scales: no gradient
        for g, h, want, n in ((got[0], again[0], deq_a.grad, "da"), (got[1], again[1], deq_b.grad, "db"),
                              (got[4], again[4], bias64.grad, "dbias")):
            where = f"{s['name']} {n} at {(batch, M, N, K)}"
            assert g.data_ptr() == bufs[n].data_ptr() and g.dtype is torch.bfloat16 and g.shape == want.shape, where
            assert not g.isnan().any(), f"{where}: an element was not written"
            err, scale = (g.double() - want).abs().max().item(), want.abs().max().item()
            assert err <= 2e-2 * scale, f"{where}: {err:.4g} > 2e-2 x {scale:.4g}"
            assert torch.equal(g, h), f"{where}: not the same bits on a second backward"
