"""Training (a spec's `training` section, issue 38) on the Triton design, under the CPU interpreter: the op of a
spec that opts in is differentiable, its backward (dgrad, wgrad with the bias gradient fused, and the forward
that stores pre or the backward's recompute) generated from the spec. Gradients against float64 autograd of the
reference for every covered chain in both save modes, odd shapes (M, N, K off the tiles, M = 1, K tails),
NaN-poisoned gradient buffers, NaN in the output's gradient, which gradients autograd asks for,
torch.autograd.gradcheck (f32: the spec dtypes have no float64), torch.compile(fullgraph=True) of a training
step with no graph break, and what stays refused (a spec without training, out= with grad)."""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.gemm.testing.reference import REFERENCES, TORCH_DTYPES

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Input #. requires gradient and is not a double:UserWarning")]

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")
CHAINS = {
    "plain": [],
    "bias": [{"op": "bias"}],
    **{fn: [{"op": "activation", "fn": fn}] for fn in ACTIVATIONS},
    **{f"bias_{fn}": [{"op": "bias"}, {"op": "activation", "fn": fn}] for fn in ACTIVATIONS},
}
SAVES = ("preact", "recompute")
ODD = (37, 45, 29)  # M, N, K: none a multiple of the 32 x 32 x 16 tiles


def training_spec(chain: str, save: str, dtype: str = "f32", b_major: str = "k", **extra: object) -> dict:
    """A small-tile Triton kernel with a backward (the interpreter walks every tail of these tiles)."""
    return {
        "name": f"train_{chain}_{save}_{dtype}_{b_major}" + "".join(f"_{k}" for k in extra),
        "kind": "gemm",
        "a": {"dtype": dtype, "major": "k"}, "b": {"dtype": dtype, "major": b_major}, "out": {"dtype": dtype},
        "epilogue": CHAINS[chain], "training": {"save": save, **extra},
        "tile": {"m": 32, "n": 32, "k": 16}, "triton": {"num_warps": 4}, "targets": ["triton:sm90"],
    }


def inputs(spec: dict, shape: tuple[int, int, int], seed: int = 0) -> dict[str, torch.Tensor]:
    """a (M, K), b (K, N) in the spec's major mode (a K-major b is an nn.Linear weight's w.t()), the bias (N,)."""
    M, N, K = shape
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[spec["a"]["dtype"]]
    a = torch.randn(M, K, generator=gen).to(dt)
    b = torch.randn(N, K, generator=gen).to(dt).t() if spec["b"]["major"] == "k" else torch.randn(K, N, generator=gen).to(dt)
    args = {"a": a, "b": b}
    if spec["epilogue"] and spec["epilogue"][0]["op"] == "bias":
        args["bias"] = torch.randn(N, generator=gen)
    return args


def reference(spec: dict, args: dict[str, torch.Tensor], grad: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The float64 reference's output and its gradients (autograd in float64) for the output's gradient `grad`."""
    leaves = {n: t.detach().double().requires_grad_() for n, t in args.items()}
    rest = {n: t for n, t in leaves.items() if n not in ("a", "b")}
    epilogue = [{"name": "bias", "along": "n", **op} if op["op"] == "bias" else op for op in spec["epilogue"]]
    out = REFERENCES["gemm"](epilogue, leaves["a"], leaves["b"], rest)
    out.backward(grad.double())
    return out.detach(), {n: t.grad for n, t in leaves.items()}


def run(fn, args: dict[str, torch.Tensor], grad: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    leaves = {n: t.detach().clone().requires_grad_() for n, t in args.items()}
    out = fn(*leaves.values())
    assert out.grad_fn is not None, "the op's output has no grad_fn"
    out.backward(grad)
    return out.detach(), {n: t.grad for n, t in leaves.items()}


def close(got: torch.Tensor, want: torch.Tensor, rel: float, what: str) -> None:
    """|got - want| within rel of want's largest magnitude (the gradients are sums over a dimension)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    scale = max(want.abs().max().item(), 1.0)
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    assert err <= rel * scale, f"{what}: max error {err:.3g} > {rel:.1g} x {scale:.3g}"


@pytest.mark.parametrize("save", SAVES)
@pytest.mark.parametrize("chain", list(CHAINS))
def test_gradients_equal_float64_autograd(chain: str, save: str, load_kernel) -> None:
    spec = training_spec(chain, save)
    mod = load_kernel(spec)
    args = inputs(spec, ODD)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(1))
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 1e-5, "out")
    for name in args:
        close(grads[name], want[name], 1e-5, f"d{name}")
        assert grads[name].dtype == args[name].dtype and grads[name].stride() == args[name].stride(), name


@pytest.mark.parametrize("save", SAVES)
@pytest.mark.parametrize("chain", ["bias_gelu_tanh", "relu", "bias_silu"])
def test_f16_gradients(chain: str, save: str, load_kernel) -> None:
    """f16 operands: G rounds to f16 for the dots (as eager's f16 backward does), sums in f32."""
    spec = training_spec(chain, save, "f16")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=2)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(3)).half()
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 4e-3, "out")
    for name in args:
        close(grads[name], want[name], 1e-2, f"d{name}")


SHAPES = [(1, 45, 29), (37, 1, 29), (37, 45, 1), (64, 32, 16), (33, 70, 50), (1, 1, 1)]


@pytest.mark.parametrize("save", SAVES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_odd_shapes(shape: tuple[int, int, int], save: str, load_kernel) -> None:
    spec = training_spec("bias_gelu", save)
    mod = load_kernel(spec)
    args = inputs(spec, shape, seed=4)
    grad = torch.randn(shape[0], shape[1], generator=torch.Generator().manual_seed(5))
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    want_out, want = reference(spec, args, grad)
    close(out, want_out, 1e-5, "out")
    for name in args:
        close(grads[name], want[name], 1e-5, f"d{name}")


def test_mn_major_weight(load_kernel) -> None:
    """b stored (K, N) row-major (b.major = "mn"): dB comes back in that layout."""
    spec = training_spec("bias_sigmoid", "preact", b_major="mn")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=6)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(7))
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    for name in args:
        close(grads[name], want[name], 1e-5, f"d{name}")
    assert grads["b"].stride() == args["b"].stride() == (ODD[1], 1)


@pytest.mark.parametrize("save", SAVES)
def test_poisoned_gradient_buffers_are_written_everywhere(save: str, load_kernel) -> None:
    """The backward writes every element of dA, dB and dbias (buffers filled with NaN first)."""
    spec = training_spec("bias_gelu_tanh", save)
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=8)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(9))
    pre = mod._forward_pre(*args.values())[1] if save == "preact" else None
    poisoned = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items()}
    da, db, dbias = mod._backward(grad, *args.values(), pre, **poisoned)
    assert da is poisoned["da"] and db is poisoned["db"] and dbias is poisoned["dbias"]
    _, want = reference(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{name}: an element was not written"
        close(got, want[name], 1e-5, f"d{name}")


@pytest.mark.parametrize("save", SAVES)
def test_nan_in_the_output_gradient_propagates_as_float64s(save: str, load_kernel) -> None:
    spec = training_spec("bias_silu", save)
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=10)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(11))
    grad[5, 7] = float("nan")
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    for name in args:
        assert torch.equal(grads[name].isnan(), want[name].isnan()), f"d{name}: NaN where float64 has none (or not)"
        assert grads[name].isnan().any()
        close(grads[name].nan_to_num(0), want[name].nan_to_num(0), 1e-5, f"d{name}")


@pytest.mark.parametrize("save", SAVES)
def test_relu_selects_on_a_nan_output_gradient(save: str, load_kernel) -> None:
    """relu's backward is torch's threshold_backward, a select: a NaN dOut where the pre-activation is <= 0 gives 0
    (dOut times the step, 0 x NaN, would give NaN), one where it is > 0 passes. G formed by grad_cols (preact) or the
    recompute GEMM's epilogue (recompute)."""
    spec = training_spec("bias_relu", save)
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=12)
    pre = args["a"].double() @ args["b"].double() + args["bias"].double()
    neg = (pre < 0).nonzero()[0]
    pos = ((pre > 0) & (torch.arange(ODD[0])[:, None] != neg[0]) & (torch.arange(ODD[1])[None, :] != neg[1])).nonzero()[0]
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(13))
    grad[neg[0], neg[1]] = grad[pos[0], pos[1]] = float("nan")
    _, grads = run(getattr(mod, spec["name"]), args, grad)
    _, want = reference(spec, args, grad)
    assert not want["a"][neg[0]].isnan().any() and want["a"][pos[0]].isnan().all()
    for name in args:
        assert torch.equal(grads[name].isnan(), want[name].isnan()), f"d{name}: NaN where float64 has none (or not)"
        close(grads[name].nan_to_num(0), want[name].nan_to_num(0), 1e-5, f"d{name}")


@pytest.mark.parametrize("needs", [("a",), ("b",), ("bias",), ("a", "bias")])
def test_only_the_gradients_asked_for(needs: tuple[str, ...], load_kernel) -> None:
    """A frozen weight (or an input that needs no gradient) gets none; the others are right."""
    spec = training_spec("bias_relu", "preact")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=12)
    leaves = {n: t.detach().clone().requires_grad_(n in needs) for n, t in args.items()}
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(13))
    getattr(mod, spec["name"])(*leaves.values()).backward(grad)
    _, want = reference(spec, args, grad)
    for n, t in leaves.items():
        if n in needs:
            close(t.grad, want[n], 1e-5, f"d{n}")
        else:
            assert t.grad is None


@pytest.mark.parametrize("save", SAVES)
def test_gradcheck(save: str, load_kernel) -> None:
    """torch.autograd.gradcheck's finite differences (in f32, the widest spec dtype: float64 is none)."""
    spec = training_spec("bias_gelu_tanh", save)
    fn = getattr(load_kernel(spec), spec["name"])
    args = [t.detach().clone().requires_grad_() for t in inputs(spec, (5, 6, 3), seed=14).values()]
    assert torch.autograd.gradcheck(fn, args, eps=1e-2, atol=2e-2, rtol=2e-2, nondet_tol=1e-6)


def test_compiled_training_step_has_no_graph_break(load_kernel) -> None:
    """torch.compile(fullgraph=True) over forward and loss, backward through the compiled graph: the op and its
    backward are custom ops with fake implementations (no graph break), gradients equal eager's."""
    spec = training_spec("bias_gelu_tanh", "preact")
    assert_compiled_step_matches_eager(getattr(load_kernel(spec), spec["name"]), inputs(spec, ODD, seed=15))


def assert_compiled_step_matches_eager(fn, args: dict[str, torch.Tensor]) -> None:
    """A loss over fn(a, b, bias) compiled with fullgraph=True (aot_eager) and differentiated: no graph break, and
    the gradients equal eager's."""
    from torch._dynamo.utils import counters

    def step(a, b, bias):
        return (fn(a, b, bias) * 0.5).square().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    leaves = [t.detach().clone().requires_grad_() for t in args.values()]
    compiled(*leaves).backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    eager = [t.detach().clone().requires_grad_() for t in args.values()]
    step(*eager).backward()
    for got, want, name in zip(leaves, eager, args, strict=True):
        close(got.grad, want.grad.double(), 1e-6, f"d{name}")


def test_out_with_grad_is_refused_and_no_grad_runs_the_forward(load_kernel) -> None:
    spec = training_spec("bias_relu", "recompute")
    mod = load_kernel(spec)
    args = inputs(spec, ODD, seed=16)
    a = args["a"].clone().requires_grad_()
    with pytest.raises(TypeError, match="out= is not supported when an argument requires grad"):
        getattr(mod, spec["name"])(a, args["b"], args["bias"], out=torch.empty(ODD[0], ODD[1]))
    with torch.no_grad():
        out = getattr(mod, spec["name"])(a, args["b"], args["bias"])
    assert out.grad_fn is None
    close(out, reference(spec, args, torch.zeros(ODD[0], ODD[1]))[0], 1e-5, "out")


def test_backward_checks_the_output_gradient(load_kernel) -> None:
    spec = training_spec("relu", "recompute")
    mod = load_kernel(spec)
    args = inputs(spec, ODD)
    with pytest.raises(TypeError, match="gradient must have dtype torch.float32"):
        mod._backward(torch.zeros(ODD[0], ODD[1], dtype=torch.float16), *args.values(), None)
    with pytest.raises(ValueError, match=r"gradient must have shape \(37, 45\)"):
        mod._backward(torch.zeros(ODD[0], ODD[0]), *args.values(), None)


def test_a_spec_without_training_still_refuses_grad(load_kernel) -> None:
    spec = {**training_spec("bias_relu", "preact"), "name": "no_training_bias_relu"}
    del spec["training"]
    mod = load_kernel(spec)
    args = inputs(spec, ODD)
    args["a"].requires_grad_()
    with pytest.raises(NotImplementedError, match="specgen's generated ops have no backward yet"):
        getattr(mod, spec["name"])(*args.values())


ALIGNED = (40, 56, 40)  # M, N, K off the 32 x 32 x 16 tiles, every row a multiple of 16 bytes: TMA reads it


def forms_launched(mod, monkeypatch, stores: list | None = None) -> list[tuple[str, str]]:
    """The backward GEMMs launched from here on, as (role, "tma" or "pointer"), and ("grad_cols", "") for the
    streaming pass (the runtime's one launch function records them); `stores` gets each TMA form's (role, D_TMA,
    D_T): whether it stored through TMA, and over the transpose."""
    from specgen.runtime.triton import training as runtime

    roles = {id(k): (role, form) for role, pair in mod._BACKWARD_KERNELS.items()
             for k, form in zip(pair, ("tma", "pointer"), strict=True)}
    launched: list[tuple[str, str]] = []
    real = runtime.launch

    def record(kernel, jit, *rest, **constexprs):
        launched.append(roles.get(id(jit), ("grad_cols", "")))
        if stores is not None and "D_TMA" in constexprs:
            stores.append((launched[-1][0], constexprs["D_TMA"], constexprs["D_T"]))
        return real(kernel, jit, *rest, **constexprs)

    monkeypatch.setattr(runtime, "launch", record)
    return launched


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("b_major", ["k", "mn"])
@pytest.mark.parametrize("save", SAVES)
def test_tma_form_where_the_layouts_allow(save: str, b_major: str, dtype: str, load_kernel, monkeypatch) -> None:
    """Aligned operands in either major run every GEMM in its TMA form (a column-major operand read as boxes of its
    transpose), tails in M, N and K included, G formed once; the gradients stay right."""
    spec = training_spec("bias_gelu_tanh", save, dtype, b_major)
    mod = load_kernel(spec)
    args = inputs(spec, ALIGNED, seed=17)
    grad = torch.randn(ALIGNED[0], ALIGNED[1], generator=torch.Generator().manual_seed(18)).to(args["a"].dtype)
    stores: list = []
    launched = forms_launched(mod, monkeypatch, stores)
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    first = "forward_pre" if save == "preact" else "recompute"
    # dgrad's and wgrad's outputs through TMA stores; dB comes back in B's layout: column-major (w.t()) is stored
    # transposed
    assert stores == [("dgrad", True, False), ("wgrad", True, b_major == "k")], stores
    # preact: the forward, then G formed with dbias beside it; recompute: G by the recompute GEMM, then dbias summed
    assert launched == [(first, "tma"), ("grad_cols", ""), ("dgrad", "tma"), ("wgrad", "tma")], launched
    want_out, want = reference(spec, args, grad)
    rel = 1e-5 if dtype == "f32" else 1e-2
    close(out, want_out, 1e-5 if dtype == "f32" else 4e-3, "out")
    for name in args:
        close(grads[name], want[name], rel, f"d{name}")


@pytest.mark.parametrize("save", SAVES)
def test_pointer_form_for_layouts_tma_cannot_read(save: str, load_kernel, monkeypatch) -> None:
    """An input TMA cannot read (a view whose rows are 41 f32 apart: not a multiple of 16 bytes) runs the GEMMs that
    read it in the pointer form, the others keep TMA; the gradients are right either way."""
    spec = training_spec("bias_silu", save)
    mod = load_kernel(spec)
    args = inputs(spec, ALIGNED, seed=19)
    grad = torch.randn(ALIGNED[0], ALIGNED[1], generator=torch.Generator().manual_seed(21))
    wide = torch.zeros(ALIGNED[0], ALIGNED[2] + 1)
    wide[:, : ALIGNED[2]] = args["a"]
    wide.requires_grad_()
    b, bias = (args[n].clone().requires_grad_() for n in ("b", "bias"))
    launched = forms_launched(mod, monkeypatch)
    getattr(mod, spec["name"])(wide[:, : ALIGNED[2]], b, bias).backward(grad)
    _, want = reference(spec, args, grad)
    close(wide.grad[:, : ALIGNED[2]], want["a"], 1e-5, "da")
    assert not wide.grad[:, ALIGNED[2]].any()
    close(b.grad, want["b"], 1e-5, "db")
    close(bias.grad, want["bias"], 1e-5, "dbias")
    # a is X of the recompute's GEMM (the forward's guard copies it into an aligned tensor first: preact's forward
    # reads that) and A^T of wgrad, which read it as it lies; dgrad reads G and B^T
    first = ("forward_pre", "tma") if save == "preact" else ("recompute", "pointer")
    assert launched == [first, ("grad_cols", ""), ("dgrad", "tma"), ("wgrad", "pointer")], launched


@pytest.mark.parametrize("save", SAVES)
def test_tma_stores_write_every_element_of_either_layout(save: str, load_kernel, monkeypatch) -> None:
    """NaN-poisoned gradient buffers of aligned shape, dA column-major and dB row-major (against their arguments'
    layouts): the TMA forms store both through TMA (dA over its transpose) and every element is written."""
    spec = training_spec("bias_gelu", save)
    mod = load_kernel(spec)
    args = inputs(spec, ALIGNED, seed=22)
    grad = torch.randn(ALIGNED[0], ALIGNED[1], generator=torch.Generator().manual_seed(23))
    pre = mod._forward_pre(*args.values())[1] if save == "preact" else None
    poisoned = {"da": torch.full((ALIGNED[2], ALIGNED[0]), float("nan")).t(),
                "db": torch.full((ALIGNED[2], ALIGNED[1]), float("nan")),
                "dbias": torch.full((ALIGNED[1],), float("nan"))}
    stores: list = []
    forms_launched(mod, monkeypatch, stores)
    da, db, dbias = mod._backward(grad, *args.values(), pre, **poisoned)
    assert ("dgrad", True, True) in stores and ("wgrad", True, False) in stores, stores
    _, want = reference(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{name}: an element was not written"
        close(got, want[name], 1e-5, f"d{name}")


@pytest.mark.parametrize("save", SAVES)
def test_the_column_pass_in_row_bands(save: str, load_kernel, monkeypatch) -> None:
    """Where the columns alone give too few programs the column pass splits the rows into bands (f32 partial sums, then
    one more launch adding them in band order): G and dbias as without bands, every element written."""
    from specgen.runtime.triton import training as runtime

    spec = training_spec("bias_gelu_tanh", save)
    mod = load_kernel(spec)
    monkeypatch.setattr(runtime, "BAND_MIN_ROWS", 8)
    monkeypatch.setitem(mod.GRAD_COLS, "BLOCK_M", 8)
    assert runtime.row_bands(ODD[0], 2, 8, -1) == (3, 16)  # 37 rows: bands of 16, 16 and 5 (at most 37 // 8)
    args = inputs(spec, ODD, seed=24)
    grad = torch.randn(ODD[0], ODD[1], generator=torch.Generator().manual_seed(25))
    pre = mod._forward_pre(*args.values())[1] if save == "preact" else None
    poisoned = {f"d{n}": torch.full_like(t, float("nan")) for n, t in args.items()}
    launched = forms_launched(mod, monkeypatch)
    da, db, dbias = mod._backward(grad, *args.values(), pre, **poisoned)
    assert launched.count(("grad_cols", "")) == 2, launched  # the banded pass, then the bands' sum
    _, want = reference(spec, args, grad)
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        assert not got.isnan().any(), f"d{name}: an element was not written"
        close(got, want[name], 1e-5, f"d{name}")


def test_a_broadcast_output_gradient_takes_the_pointer_form(load_kernel, monkeypatch) -> None:
    """dOut broadcast along M (stride 0: the gradient of (out * row).sum()) is G itself without an activation: dgrad
    reads it by pointers (a descriptor's rows cannot overlap), wgrad too; the gradients are right."""
    spec = training_spec("bias", "preact")
    mod = load_kernel(spec)
    args = inputs(spec, ALIGNED, seed=26)
    row = torch.randn(ALIGNED[1], generator=torch.Generator().manual_seed(27))
    grad = row.expand(ALIGNED[0], ALIGNED[1])
    assert grad.stride() == (0, 1)
    launched = forms_launched(mod, monkeypatch)
    da, db, dbias = mod._backward(grad, *args.values(), None)
    assert ("dgrad", "pointer") in launched and ("wgrad", "pointer") in launched, launched
    _, want = reference(spec, args, grad.contiguous())
    for got, name in ((da, "a"), (db, "b"), (dbias, "bias")):
        close(got, want[name], 1e-5, f"d{name}")


@pytest.mark.parametrize("n", [200, 300])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_forward_pre_over_two_column_halves(n: int, dtype: str, load_kernel) -> None:
    """A forward_pre tile of 256 columns stores pre and act(pre) over the accumulator's two halves in turn (a whole
    tile's stores spilled on the GPU): N = 200 ends inside a tile's second half, N = 300 inside the next tile's
    first; pre as saved, out and every gradient against float64, both forms (aligned rows: TMA loads)."""
    spec = training_spec("bias_gelu_tanh", "preact", dtype, pre={"tile": {"m": 32, "n": 256, "k": 16}})
    mod = load_kernel(spec)
    assert mod.METADATA["training"]["kernels"]["forward_pre"]["tile"] == [32, 256, 16]
    args = inputs(spec, (40, n, 40), seed=5)
    grad = torch.randn(40, n, generator=torch.Generator().manual_seed(6)).to(args["a"].dtype)
    want_out, want = reference(spec, args, grad)
    out, pre = mod._forward_pre(*args.values())
    want_pre = args["a"].double() @ args["b"].double() + args["bias"].double()
    close(pre, want_pre, 1e-5 if dtype == "f32" else 4e-3, "pre")
    close(out, want_out, 1e-5 if dtype == "f32" else 4e-3, "out")
    out, grads = run(getattr(mod, spec["name"]), args, grad)
    for name in args:
        close(grads[name], want[name], 1e-5 if dtype == "f32" else 1e-2, f"d{name}")
