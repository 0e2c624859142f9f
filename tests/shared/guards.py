"""The generated launchers (the shared torch host part) refuse bad arguments before anything launches.

Each case starts from a valid call, breaks one argument, and expects TypeError (wrong dtype, not a
tensor, not a float) or ValueError (rank, extents, major mode, alignment, TMA strides, shapes, device)
whose message names the kernel and the argument. The module's `_launcher` is replaced by a tripwire
that fails the test if it is touched, and the NaN-poisoned output must come back untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from kernels import catalogue, interpreter_variant

from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.dtypes import DType

# The interpreter's sigmoid (in the legal-layout calls) warns where exp overflows; the result is exact.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

M, N, K, BATCH = 24, 48, 32, 3
TILE = {"m": 16, "n": 32, "k": 32}
CATALOGUE = catalogue()


def _variant(base: str, name: str, **changes: object) -> dict:
    spec = interpreter_variant(CATALOGUE[base], name=name, tile=dict(TILE), **changes)
    return GemmSpec.model_validate(spec).model_dump(mode="json")


KERNELS = {
    # pointer loads, A mn-major, B k-major, scalar alpha, residual c
    "ptr": _variant("gemm_residual_bf16", "guard_residual"),
    # pointer loads, A k-major, B mn-major
    "relu": _variant("gemm_relu_f16", "guard_relu", triton={"num_warps": 8, "tma": False}),
    # persistent TMA, both k-major, scale_a (M,) and scale_b (N,)
    "tma": _variant("gemm_fp8_rowwise", "guard_rowwise"),
    # persistent TMA with a bias (N,)
    "bias": _variant("gemm_bias_gelu_bf16", "guard_bias_gelu"),
    # batched persistent TMA, B mn-major
    "bmm": _variant("bmm_bf16", "guard_bmm"),
    # batched, one program per tile, pointer loads, with a batched residual
    "bmm_res": _variant("bmm_bf16", "guard_bmm_residual", schedule={"persistent": False}, triton={"tma": False},
                        epilogue=[{"op": "residual", "dtype": "f16", "beta": 0.5}]),
}


def torch_dtype(dt: str) -> torch.dtype:
    return getattr(torch, DType(dt).info.torch)


def layout(x: torch.Tensor, contiguous_dim: int) -> torch.Tensor:
    """x with stride 1 along `contiguous_dim` (-1 or -2)."""
    return x.contiguous() if contiguous_dim == -1 else x.transpose(-1, -2).contiguous().transpose(-1, -2)


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """A copy of x, laid out alike, whose base sits one element past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype)[1:]
    perm = sorted(range(x.dim()), key=lambda d: -x.stride(d))  # outermost first
    view = flat.view([x.shape[d] for d in perm]).permute([perm.index(d) for d in range(x.dim())])
    view.copy_(x)
    assert view.stride() == x.stride() and view.data_ptr() % 16
    return view


def padded_rows(x: torch.Tensor, extra: int) -> torch.Tensor:
    """x (row-major in its last dim) with rows `extra` elements longer than they need to be."""
    storage = torch.zeros(*x.shape[:-1], x.shape[-1] + extra, dtype=x.dtype)
    view = storage[..., : x.shape[-1]]
    view.copy_(x)
    return view


class Call:
    """A valid call of one kernel; tests replace one argument and call it."""

    def __init__(self, key: str, load_kernel) -> None:
        self.spec = spec = KERNELS[key]
        self.module = load_kernel(spec)
        self.name = spec["name"]
        self.fn = getattr(self.module, self.name)
        batch = (BATCH,) if spec["batch"] else ()
        g = torch.Generator().manual_seed(0)
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        self.args: dict[str, object] = {
            "a": layout(torch.randn(*batch, M, K, generator=g).to(a_dt), -1 if spec["a"]["major"] == "k" else -2),
            "b": layout(torch.randn(*batch, K, N, generator=g).to(b_dt), -2 if spec["b"]["major"] == "k" else -1),
        }
        for arg in GemmSpec.model_validate(spec).runtime_args():
            dt = torch_dtype(arg.dtype)
            self.args[arg.name] = {
                "scalar": lambda: 0.5,
                "vec_m": lambda dt=dt: torch.rand(M, generator=g).to(dt),
                "vec_n": lambda dt=dt: torch.rand(N, generator=g).to(dt),
                "matrix": lambda dt=dt: torch.randn(*batch, M, N, generator=g).to(dt),
            }[arg.shape]()
        self.out = torch.full((*batch, M, N), float("nan"), dtype=torch_dtype(spec["out"]["dtype"]))

    def __call__(self) -> torch.Tensor:
        return self.fn(*self.args.values(), out=self.out)


class Launched(AssertionError):
    pass


class Tripwire:
    """Stands in for the module's TritonLauncher: any use means the guards let the call through."""

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise Launched("the kernel launched")

    def __getattr__(self, name: str) -> object:
        raise Launched(f"the launcher was asked for {name!r}")


def expect(call: Call, monkeypatch: pytest.MonkeyPatch, exc: type[Exception], arg: str, pattern: str) -> None:
    monkeypatch.setattr(call.module, "_launcher", Tripwire())
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{call.name}: "), message
    assert f"argument '{arg}'" in message or re.search(rf"\b{re.escape(arg)}\.shape\b", message), message
    assert re.search(pattern, message), message
    if call.out.device.type == "cpu":
        assert call.out.isnan().all(), "the output was written"


# (kernel, argument, how to break it, exception, message pattern). `out` breaks replace call.out.
Break = Callable[[Call], object]
CASES: list[tuple[str, str, str, Break, type[Exception], str]] = [
    # dtypes, Python types
    ("ptr", "a", "f32", lambda c: c.args["a"].float(), TypeError, r"dtype torch.float16, got torch.float32"),
    ("tma", "b", "bf16", lambda c: c.args["b"].bfloat16(), TypeError, r"dtype torch.float16"),
    ("tma", "scale_a", "f16", lambda c: c.args["scale_a"].half(), TypeError, r"dtype torch.float32"),
    ("bias", "bias", "f32", lambda c: c.args["bias"].float(), TypeError, r"dtype torch.float16"),
    ("ptr", "c", "f32", lambda c: c.args["c"].float(), TypeError, r"dtype torch.float16"),
    ("relu", "out", "f32", lambda c: torch.full((M, N), float("nan")), TypeError, r"dtype torch.float16"),
    ("ptr", "a", "ndarray", lambda c: c.args["a"].numpy(), TypeError, r"torch.Tensor, got ndarray"),
    ("relu", "b", "list", lambda c: c.args["b"].tolist(), TypeError, r"torch.Tensor, got list"),
    ("bias", "bias", "float", lambda c: 1.0, TypeError, r"torch.Tensor, got float"),
    ("ptr", "c", "none", lambda c: None, TypeError, r"torch.Tensor, got NoneType"),
    ("ptr", "alpha", "tensor", lambda c: torch.tensor(0.5), TypeError, r"Python float, got Tensor"),
    ("ptr", "alpha", "str", lambda c: "0.5", TypeError, r"Python float, got str"),
    ("ptr", "alpha", "bool", lambda c: True, TypeError, r"Python float, got bool"),
    ("ptr", "alpha", "none", lambda c: None, TypeError, r"Python float, got NoneType"),
    # ranks and extents
    ("ptr", "a", "rank3", lambda c: c.args["a"][None], ValueError, r"must have 2 dims"),
    ("tma", "b", "rank1", lambda c: c.args["b"][:, 0], ValueError, r"must have 2 dims"),
    ("bmm", "a", "rank2", lambda c: c.args["a"][0], ValueError, r"must have 3 dims"),
    ("relu", "b", "K+1", lambda c: torch.randn(K + 1, N, dtype=torch.float16), ValueError,
     r"b\.shape\[0\] \(K\) = 33 must equal a\.shape\[1\] = 32"),
    ("tma", "b", "K-8", lambda c: c.args["b"][:-8], ValueError, r"b\.shape\[0\] \(K\) = 24 must equal"),
    ("bmm", "b", "batch", lambda c: c.args["b"][:2], ValueError, r"b\.shape\[0\] \(batch\) = 2 must equal a\.shape\[0\] = 3"),
    ("bmm", "b", "K", lambda c: torch.randn(BATCH, K - 8, N, dtype=torch.float16), ValueError,
     r"b\.shape\[1\] \(K\) = 24 must equal a\.shape\[2\] = 32"),
    # major modes
    ("ptr", "a", "k-major", lambda c: c.args["a"].contiguous(), ValueError, r"contiguous along dim 0"),
    ("ptr", "b", "mn-major", lambda c: c.args["b"].contiguous(), ValueError, r"contiguous along dim 0"),
    ("relu", "b", "k-major", lambda c: layout(c.args["b"], -2), ValueError, r"contiguous along dim 1"),
    ("tma", "a", "transposed", lambda c: layout(c.args["a"], -2), ValueError, r"contiguous along dim 1"),
    ("tma", "b", "mn-major", lambda c: c.args["b"].contiguous(), ValueError, r"contiguous along dim 0"),
    ("bmm", "b", "k-major", lambda c: layout(c.args["b"], -2), ValueError, r"contiguous along dim 2"),
    ("bmm", "a", "batch-inner", lambda c: c.args["a"].transpose(0, 2).contiguous().transpose(0, 2), ValueError,
     r"contiguous along dim 2"),
    # out and residual shapes and layouts; vector lengths and layouts
    ("ptr", "out", "shape", lambda c: torch.full((M, N + 1), float("nan"), dtype=torch.float16), ValueError,
     r"must have shape \(24, 48\), got \(24, 49\)"),
    ("bmm", "out", "batch", lambda c: torch.full((BATCH - 1, M, N), float("nan"), dtype=torch.float16), ValueError,
     r"must have shape \(3, 24, 48\)"),
    ("relu", "out", "column-major", lambda c: layout(c.out, -2), ValueError, r"contiguous along dim 1"),
    ("bias", "bias", "length", lambda c: c.args["bias"][:-1], ValueError, r"must hold N = 48 values"),
    ("tma", "scale_a", "length", lambda c: torch.rand(M + 1), ValueError, r"must hold M = 24 values"),
    ("tma", "scale_b", "2-D", lambda c: c.args["scale_b"].reshape(2, N // 2), ValueError, r"must hold N = 48 values"),
    ("ptr", "c", "shape", lambda c: c.args["c"][:, :-1], ValueError, r"must have shape \(24, 48\), got \(24, 47\)"),
    ("ptr", "c", "transposed", lambda c: layout(c.args["c"], -2), ValueError, r"contiguous along dim 1"),
    ("bmm_res", "c", "batch", lambda c: c.args["c"][:1], ValueError, r"must have shape \(3, 24, 48\), got \(1, 24, 48\)"),
    ("bmm_res", "c", "rank", lambda c: c.args["c"][0], ValueError, r"must have 3 dims"),
    # devices: under the interpreter everything lives on the CPU ('meta' stands for any other device)
    ("ptr", "a", "meta", lambda c: c.args["a"].to("meta"), ValueError, r"must be on the CPU under TRITON_INTERPRET=1"),
    ("relu", "b", "meta", lambda c: c.args["b"].to("meta"), ValueError, r"must be on cpu \(where 'a' is\), got meta"),
    ("tma", "b", "meta", lambda c: c.args["b"].to("meta"), ValueError, r"must be on cpu"),
    ("tma", "scale_b", "meta", lambda c: c.args["scale_b"].to("meta"), ValueError, r"must be on cpu"),
    ("bias", "bias", "meta", lambda c: c.args["bias"].to("meta"), ValueError, r"must be on cpu"),
    ("ptr", "c", "meta", lambda c: c.args["c"].to("meta"), ValueError, r"must be on cpu"),
    ("bmm", "out", "meta", lambda c: c.out.to("meta"), ValueError, r"must be on cpu"),
    ("relu", "out", "meta", lambda c: c.out.to("meta"), ValueError, r"must be on cpu"),
]


# Unusual but legal arguments: the per-call fast check hands them to the full validation, which accepts.
LEGAL = [
    ("ptr", "alpha", "int", lambda c: 2),
    ("tma", "scale_a", "(M, 1)", lambda c: c.args["scale_a"].reshape(M, 1)),
    ("tma", "scale_b", "(1, N)", lambda c: c.args["scale_b"].reshape(1, N)),
    ("bias", "bias", "(N, 1)", lambda c: c.args["bias"].reshape(N, 1)),
    ("ptr", "b", "padded leading stride", lambda c: padded_rows(c.args["b"].t(), 3).t()),
    ("relu", "a", "padded leading stride", lambda c: padded_rows(c.args["a"], 1)),
    ("tma", "a", "16-byte padded rows", lambda c: padded_rows(c.args["a"], 8)),
    ("ptr", "c", "padded rows", lambda c: padded_rows(c.args["c"], 5)),
]


# Legal inputs the kernel cannot read or write in place: the launcher copies them once (a base off a
# 16-byte boundary, a TMA stride that is not a multiple of 16 bytes, a strided vector), and the result
# is the same bits as the aligned call's. Every backend accepts what torch.matmul accepts in the spec's
# major modes (the conformance suite, tests/conformance/, holds the backends to the same outcome).
STAGED: list[tuple[str, str, str, Break]] = [
    ("ptr", "a", "offset", lambda c: misaligned(c.args["a"])),
    ("relu", "b", "offset", lambda c: misaligned(c.args["b"])),
    ("tma", "a", "offset", lambda c: misaligned(c.args["a"])),
    ("tma", "scale_b", "offset", lambda c: misaligned(c.args["scale_b"])),
    ("bias", "bias", "offset", lambda c: misaligned(c.args["bias"])),
    ("ptr", "c", "offset", lambda c: misaligned(c.args["c"])),
    ("relu", "out", "offset", lambda c: misaligned(c.out)),
    ("bmm", "out", "offset", lambda c: misaligned(c.out)),
    ("tma", "a", "stride", lambda c: padded_rows(c.args["a"], 4)),
    ("bias", "b", "stride", lambda c: padded_rows(c.args["b"].t(), 2).t()),
    ("bmm", "b", "stride", lambda c: padded_rows(c.args["b"], 1)),
    ("bmm", "a", "batch stride", lambda c: _batch_padded(c.args["a"], 4)),
    ("tma", "out", "stride", lambda c: padded_rows(c.out, 4)),
    ("bmm", "out", "batch stride", lambda c: _batch_padded(c.out, 4)),
    ("tma", "scale_a", "strided", lambda c: _strided(c.args["scale_a"])),
]


def _batch_padded(x: torch.Tensor, extra: int) -> torch.Tensor:
    """x (batched, contiguous) with a batch stride `extra` elements longer than it needs to be."""
    b, m, n = x.shape
    view = torch.full((b * (m * n + extra),), float("nan"), dtype=x.dtype).as_strided((b, m, n), (m * n + extra, n, 1))
    view.copy_(x)
    return view


def _strided(v: torch.Tensor) -> torch.Tensor:
    """v's values in every other element of a longer vector."""
    view = torch.zeros(2 * v.numel(), dtype=v.dtype)[::2]
    view.copy_(v)
    return view


def _contiguous_dim(spec: dict, arg: str) -> int:
    if arg == "a":
        return -1 if spec["a"]["major"] == "k" else -2
    if arg == "b":
        return -2 if spec["b"]["major"] == "k" else -1
    return -1  # out and residuals are row-major


def _span(x: torch.Tensor, contiguous_dim: int) -> int:
    """Elements a pointer kernel's 32-bit offsets must reach: outer extent x leading stride."""
    lead = -2 if contiguous_dim == -1 else -1
    return x.shape[lead] * x.stride(lead)


def _widen(x: torch.Tensor, contiguous_dim: int) -> torch.Tensor:
    """x with a leading stride 64 elements wider (same values, same major mode)."""
    if contiguous_dim == -1:
        return padded_rows(x, 64)
    return padded_rows(x.transpose(-1, -2).contiguous(), 64).transpose(-1, -2)


class GuardTests:
    """The argument-guard tests every torch-facing backend's folder runs (the guards come from the
    shared torch host template): subclass as `Test<Backend>Guards`."""

    @pytest.mark.parametrize(("kernel", "arg", "how", "make", "exc", "pattern"), CASES,
                             ids=[f"{k}-{a}-{h}" for k, a, h, *_ in CASES])
    def test_guard_raises_before_launch(self, kernel, arg, how, make, exc, pattern, load_kernel, monkeypatch) -> None:
        call = Call(kernel, load_kernel)
        if arg == "out":
            call.out = make(call)
        else:
            call.args[arg] = make(call)
        expect(call, monkeypatch, exc, arg, pattern)

    def test_tma_rows_of_the_allocated_output(self, load_kernel) -> None:
        """With out=None, a TMA kernel whose output rows are not 16-byte multiples (N = 20 f16: 40 bytes)
        writes a padded buffer and returns a contiguous copy of it: the same values as a pointer kernel."""
        call = Call("tma", load_kernel)
        b = layout(torch.randn(K, 20, dtype=torch.float16), -2)  # B's own strides are fine: K is contiguous
        scale_b = torch.rand(20)
        got = call.fn(call.args["a"], b, call.args["scale_a"], scale_b)
        assert got.shape == (M, 20) and got.is_contiguous()
        want = (call.args["a"].double() @ b.double()) * call.args["scale_a"].double()[:, None] * scale_b.double()
        torch.testing.assert_close(got.double(), want, atol=4e-3, rtol=4e-3)

    @pytest.mark.parametrize(("kernel", "arg", "how", "make"), STAGED, ids=[f"{k}-{a}-{h}" for k, a, h, _ in STAGED])
    def test_unaligned_inputs_are_staged(self, kernel, arg, how, make, load_kernel) -> None:
        """An input the kernel cannot read in place is copied, an output it cannot write is staged and
        copied back: the same bits as the aligned call, and nothing outside `out` written."""
        call = Call(kernel, load_kernel)
        reference = call().clone()
        if arg == "out":
            call.out = make(call)
            call.out.fill_(float("nan"))
        else:
            call.args[arg] = make(call)
            call.out = torch.full_like(call.out, float("nan"))
        result = call()
        assert result is call.out
        assert torch.equal(result, reference)

    @pytest.mark.parametrize("kernel", list(KERNELS))
    def test_valid_call_reaches_the_launcher(self, kernel: str, load_kernel, monkeypatch) -> None:
        """The tripwire is wired: the unbroken call of every case above gets as far as the launch."""
        call = Call(kernel, load_kernel)
        monkeypatch.setattr(call.module, "_launcher", Tripwire())
        with pytest.raises(Launched):
            call()

    @pytest.mark.parametrize(("kernel", "arg", "how", "make"), LEGAL, ids=[f"{k}-{a}-{h}" for k, a, h, _ in LEGAL])
    def test_legal_layouts_are_accepted(self, kernel, arg, how, make, load_kernel) -> None:
        call = Call(kernel, load_kernel)
        reference = call().clone()
        call.args[arg] = make(call)
        call.out = torch.full_like(call.out, float("nan"))
        result = call()
        if arg == "alpha":  # 2 instead of 0.5
            a, b, c = (call.args[n].double() for n in "abc")
            torch.testing.assert_close(result.double(), 2 * (a @ b) + c, atol=2e-2, rtol=4e-3)
        else:
            assert torch.equal(result, reference)

    @pytest.mark.parametrize(("kernel", "arg"), [("ptr", "a"), ("relu", "b"), ("ptr", "c"), ("relu", "out"), ("bmm_res", "a")])
    def test_pointer_kernels_refuse_matrices_past_32_bit_offsets(self, kernel, arg, load_kernel, monkeypatch) -> None:
        """Pointer kernels index within one matrix in 32 bits: a matrix spanning 2**31 elements or more
        would wrap silently, so the guards refuse it. The limit is lowered (the fast check and the full
        validation both read it at call time) to just above every other matrix's span, and `arg` widened
        past it, instead of allocating 4 GiB."""
        import specgen.runtime.guards as guards

        call = Call(kernel, load_kernel)
        tensors = {**{k: v for k, v in call.args.items() if isinstance(v, torch.Tensor) and v.dim() >= 2}, "out": call.out}
        limit = max(_span(x, _contiguous_dim(call.spec, k)) for k, x in tensors.items() if k != arg) + 1
        wide = _widen(tensors[arg], _contiguous_dim(call.spec, arg))
        assert _span(wide, _contiguous_dim(call.spec, arg)) >= limit
        if arg == "out":
            call.out = wide
        else:
            call.args[arg] = wide
        monkeypatch.setattr(guards, "INT32_SPAN", limit)
        expect(call, monkeypatch, ValueError, arg, r"indexes within a matrix in 32 bits")

    def test_int32_span_guard_boundary(self) -> None:
        from specgen.runtime.guards import INT32_SPAN, int32_span

        int32_span("k", "a", 2**16, 2**15 - 1)  # 2**31 - 2**16 elements: fine
        with pytest.raises(ValueError, match=r"k: argument 'a' spans 65536 x 32768 = 2147483648 elements"):
            int32_span("k", "a", 2**16, 2**15)
        assert INT32_SPAN == 2**31
