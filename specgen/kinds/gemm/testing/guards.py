"""The argument guards every GEMM backend's torch-facing entry runs before anything launches: subclass
`GuardTests` as `Test<Backend>Guards` (and `StagingTests` where the kernel can run here).

Each case starts from a valid call, breaks one argument, and expects TypeError (wrong dtype, not a
tensor, not a number) or ValueError (rank, extents, major mode, shapes, device) whose message names the
kernel and the argument. The module's launch is replaced by a tripwire (`trip`) that fails the test if
it is touched, and a NaN-poisoned `out` must come back untouched. Two faces share the case table:

- `TORCH_HOST`: the shared torch host part (templates/gemm/torch/host.jinja, specgen/runtime/guards.py):
  `name(a, b, *args, out=None)`; `{device}` / `{a_device}` in a pattern are the face's device words;
- `DLPACK_TO_JAX`: `name_torch(a, b, *args)`, torch tensors handed to the JAX entry through DLPack
  (specgen/runtime/jax.py: `_stored` and the trace-time checks), which has no `out`.

`{<arg>}` in a pattern is that argument's torch dtype as the spec says it (`torch.float16`), `{<arg>_np}`
its numpy-style name (`float16`). A subclass gives `KERNELS` (key -> spec; the keys' roles are below),
the `module` fixture (spec -> loaded module), `trip(call, monkeypatch)`, and `place(x)` (how a tensor
argument is handed over: as it is; CUDA stand-ins where the guards want CUDA tensors).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.testing.data import torch_dtype

M, N, K, BATCH = 24, 48, 32, 3

# The kernels the cases name, by role (a backend's KERNELS gives a spec for each):
ROLES = {
    "ptr": "A mn-major, B k-major, scalar alpha, residual c",
    "relu": "A k-major, B mn-major, no runtime arguments",
    "tma": "A and B k-major, scale_a (M,) and scale_b (N,)",
    "bias": "a bias (N,)",
    "bmm": "batched, B mn-major",
    "bmm_res": "batched, with a batched residual c",
}


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


def batch_padded(x: torch.Tensor, extra: int) -> torch.Tensor:
    """x (batched, contiguous) with a batch stride `extra` elements longer than it needs to be."""
    b, m, n = x.shape
    view = torch.full((b * (m * n + extra),), float("nan"), dtype=x.dtype).as_strided((b, m, n), (m * n + extra, n, 1))
    view.copy_(x)
    return view


def strided(v: torch.Tensor) -> torch.Tensor:
    """v's values in every other element of a longer vector."""
    view = torch.zeros(2 * v.numel(), dtype=v.dtype)[::2]
    view.copy_(v)
    return view


def contiguous_dim(spec: dict, arg: str) -> int:
    if arg == "a":
        return -1 if spec["a"]["major"] == "k" else -2
    if arg == "b":
        return -2 if spec["b"]["major"] == "k" else -1
    return -1  # out and residuals are row-major


class Call:
    """A valid call of one kernel; tests replace one argument and call it. `entry`: the function's name
    after the kernel's (`"_torch"` for the DLPack door); `out`: whether it takes `out=`; `place`: how each
    tensor is handed over (applied again to whatever a test puts in)."""

    def __init__(self, spec: dict, module: object, *, entry: str = "", out: bool = True,
                 place: Callable[[object], object] = lambda x: x) -> None:
        self.spec, self.module, self.place, self.takes_out = spec, module, place, out
        self.name = spec["name"]
        self.fn = getattr(module, self.name + entry)
        batch = (BATCH,) if spec["batch"] else ()
        g = torch.Generator().manual_seed(0)
        a_dt, b_dt = torch_dtype(spec["a"]["dtype"]), torch_dtype(spec["b"]["dtype"])
        self.args: dict[str, object] = {
            "a": layout(torch.randn(*batch, M, K, generator=g).to(a_dt), contiguous_dim(spec, "a")),
            "b": layout(torch.randn(*batch, K, N, generator=g).to(b_dt), contiguous_dim(spec, "b")),
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

    def dtypes(self) -> dict[str, str]:
        """`{<arg>}` and `{<arg>_np}` for every argument and `out`: the spec's dtypes, as patterns name them."""
        names = {"a": self.spec["a"]["dtype"], "b": self.spec["b"]["dtype"], "out": self.spec["out"]["dtype"]}
        names.update((arg.name, arg.dtype) for arg in GemmSpec.model_validate(self.spec).runtime_args())
        out = {}
        for name, dt in names.items():
            out[name] = str(torch_dtype(dt))
            out[f"{name}_np"] = out[name].removeprefix("torch.")
        return out

    def __call__(self) -> torch.Tensor:
        scalars = {arg.name for arg in GemmSpec.model_validate(self.spec).runtime_args() if arg.shape == "scalar"}
        args = [v if n in scalars else self.place(v) for n, v in self.args.items()]
        if self.takes_out:
            return self.fn(*args, out=self.place(self.out))
        return self.fn(*args)


class Launched(AssertionError):
    pass


class Tripwire:
    """Stands in for a module's launch: any use means the guards let the call through."""

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise Launched("the kernel launched")

    def __getattr__(self, name: str) -> object:
        raise Launched(f"the launcher was asked for {name!r}")


def expect(call: Call, exc: type[Exception], arg: str, pattern: str) -> None:
    """The call raises `exc` naming the kernel and `arg`, matching `pattern`; the output stays poisoned."""
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{call.name}: "), message
    assert f"argument '{arg}'" in message or re.search(rf"\b{re.escape(arg)}\.shape\b", message), message
    assert re.search(pattern, message), message
    if call.out.device.type == "cpu":
        assert call.out.isnan().all(), "the output was written"


# (kernel, argument, how to break it, exception, message pattern), as the torch host part says it.
# `out` breaks replace call.out.
Break = Callable[[Call], object]
CASES: list[tuple[str, str, str, Break, type[Exception], str]] = [
    # dtypes, Python types
    ("ptr", "a", "f32", lambda c: c.args["a"].float(), TypeError, r"dtype {a}, got torch.float32"),
    ("tma", "b", "bf16", lambda c: c.args["b"].bfloat16(), TypeError, r"dtype {b}"),
    ("tma", "scale_a", "f16", lambda c: c.args["scale_a"].half(), TypeError, r"dtype {scale_a}"),
    ("bias", "bias", "f32", lambda c: c.args["bias"].float(), TypeError, r"dtype {bias}"),
    ("ptr", "c", "f32", lambda c: c.args["c"].float(), TypeError, r"dtype {c}"),
    ("relu", "out", "f32", lambda c: torch.full((M, N), float("nan")), TypeError, r"dtype {out}"),
    ("ptr", "a", "ndarray", lambda c: c.args["a"].float().numpy(), TypeError, r"torch.Tensor, got ndarray"),
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
    ("relu", "b", "K+1", lambda c: layout(torch.randn(K + 1, N).to(c.args["b"].dtype), contiguous_dim(c.spec, "b")),
     ValueError, r"b\.shape\[0\] \(K\) = 33 must equal a\.shape\[1\] = 32"),
    ("tma", "b", "K-8", lambda c: c.args["b"][:-8], ValueError, r"b\.shape\[0\] \(K\) = 24 must equal"),
    ("bmm", "b", "batch", lambda c: c.args["b"][:2], ValueError, r"b\.shape\[0\] \(batch\) = 2 must equal a\.shape\[0\] = 3"),
    ("bmm", "b", "K", lambda c: layout(torch.randn(BATCH, K - 8, N).to(c.args["b"].dtype), contiguous_dim(c.spec, "b")),
     ValueError, r"b\.shape\[1\] \(K\) = 24 must equal a\.shape\[2\] = 32"),
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
    ("ptr", "out", "shape", lambda c: torch.full((M, N + 1), float("nan"), dtype=c.out.dtype), ValueError,
     r"must have shape \(24, 48\), got \(24, 49\)"),
    ("bmm", "out", "batch", lambda c: torch.full((BATCH - 1, M, N), float("nan"), dtype=c.out.dtype), ValueError,
     r"must have shape \(3, 24, 48\)"),
    ("relu", "out", "column-major", lambda c: layout(c.out, -2), ValueError, r"contiguous along dim 1"),
    ("bias", "bias", "length", lambda c: c.args["bias"][:-1], ValueError, r"must hold N = 48 values"),
    ("tma", "scale_a", "length", lambda c: torch.rand(M + 1), ValueError, r"must hold M = 24 values"),
    ("tma", "scale_b", "2-D", lambda c: c.args["scale_b"].reshape(2, N // 2), ValueError, r"must hold N = 48 values"),
    ("ptr", "c", "shape", lambda c: c.args["c"][:, :-1], ValueError, r"must have shape \(24, 48\), got \(24, 47\)"),
    ("ptr", "c", "transposed", lambda c: layout(c.args["c"], -2), ValueError, r"contiguous along dim 1"),
    ("bmm_res", "c", "batch", lambda c: c.args["c"][:1], ValueError, r"must have shape \(3, 24, 48\), got \(1, 24, 48\)"),
    ("bmm_res", "c", "rank", lambda c: c.args["c"][0], ValueError, r"must have 3 dims"),
    # devices ('meta' stands for any other device than the one the face wants)
    ("ptr", "a", "meta", lambda c: c.args["a"].to("meta"), ValueError, r"must be on {a_device}"),
    ("relu", "b", "meta", lambda c: c.args["b"].to("meta"), ValueError, r"must be on {device} \(where 'a' is\), got meta"),
    ("tma", "b", "meta", lambda c: c.args["b"].to("meta"), ValueError, r"must be on {device}"),
    ("tma", "scale_b", "meta", lambda c: c.args["scale_b"].to("meta"), ValueError, r"must be on {device}"),
    ("bias", "bias", "meta", lambda c: c.args["bias"].to("meta"), ValueError, r"must be on {device}"),
    ("ptr", "c", "meta", lambda c: c.args["c"].to("meta"), ValueError, r"must be on {device}"),
    ("bmm", "out", "meta", lambda c: c.out.to("meta"), ValueError, r"must be on {device}"),
    ("relu", "out", "meta", lambda c: c.out.to("meta"), ValueError, r"must be on {device}"),
]


def case_id(kernel: str, arg: str, how: str) -> str:
    return f"{kernel}-{arg}-{how}"


# What the DLPack door says instead (None: the case does not apply: an `out` it does not take).
_JAX_SHAPE = r"has shape \({}\), expected \({}\)"
DLPACK_TO_JAX: dict[str, tuple[type[Exception], str] | None] = {
    "ptr-a-f32": (TypeError, r"argument 'a' is float32, expected {a_np}"),
    "tma-b-bf16": (TypeError, r"argument 'b' is bfloat16, expected {b_np}"),
    "tma-scale_a-f16": (TypeError, r"argument 'scale_a' is float16, expected {scale_a_np}"),
    "bias-bias-f32": (TypeError, r"argument 'bias' is float32, expected {bias_np}"),
    "ptr-c-f32": (TypeError, r"argument 'c' is float32, expected {c_np}"),
    "ptr-alpha-tensor": (TypeError, r"must be a number or a one-element array, got Tensor"),
    "ptr-alpha-str": (TypeError, r"must be a number or a one-element array, got str"),
    "ptr-alpha-bool": (TypeError, r"must be a number or a one-element array, got bool"),
    "ptr-alpha-none": (TypeError, r"must be a number or a one-element array, got NoneType"),
    "ptr-a-rank3": (ValueError, r"argument 'a' has shape \(1, 32, 24\), expected rank 2"),
    "tma-b-rank1": (ValueError, r"argument 'b' has shape \(32,\), expected rank 2"),
    "bmm-a-rank2": (ValueError, r"argument 'a' has shape \(24, 32\), expected rank 3"),
    "relu-b-K+1": (ValueError, _JAX_SHAPE.format("33, 48", "32, 48") + " from the other arguments"),
    "tma-b-K-8": (ValueError, _JAX_SHAPE.format("48, 24", "48, 32") + " from the other arguments"),
    "bmm-b-batch": (ValueError, _JAX_SHAPE.format("2, 32, 48", "3, 32, 48") + " from the other arguments"),
    "bmm-b-K": (ValueError, _JAX_SHAPE.format("3, 24, 48", "3, 32, 48") + " from the other arguments"),
    "bias-bias-length": (ValueError, _JAX_SHAPE.format("47,", "48,") + r" or \(1, 48\)"),
    "tma-scale_a-length": (ValueError, _JAX_SHAPE.format("25,", "24,") + r" or \(24, 1\)"),
    "tma-scale_b-2-D": (ValueError, _JAX_SHAPE.format("2, 24", "48,") + r" or \(1, 48\)"),
    "ptr-c-shape": (ValueError, _JAX_SHAPE.format("24, 47", "24, 48") + " from the other arguments"),
    "bmm_res-c-batch": (ValueError, _JAX_SHAPE.format("1, 24, 48", "3, 24, 48") + " from the other arguments"),
    "bmm_res-c-rank": (ValueError, r"argument 'c' has shape \(24, 48\), expected rank 3"),
    **{case_id(k, a, h): (ValueError, r"must be on the CPU or a CUDA device \(DLPack to jax\), got meta")
       for k, a, h, *_ in CASES if h == "meta" and a != "out"},
    **{case_id(k, a, h): None for k, a, h, *_ in CASES if a == "out"},
}

TORCH_HOST, DLPACK_JAX = "torch host", "DLPack to JAX"


class GuardTests:
    """Bad arguments are refused, naming the kernel and the argument, before anything launches."""

    KERNELS: dict[str, dict] = {}
    FACE = TORCH_HOST
    DEVICE_WORDS = {"device": "cpu", "a_device": "the CPU under TRITON_INTERPRET=1"}

    @classmethod
    def guard_cases(cls) -> list[tuple[str, str, str, Break, type[Exception], str]]:
        out = []
        for kernel, arg, how, make, exc, pattern in CASES:
            if cls.FACE == DLPACK_JAX:
                override = DLPACK_TO_JAX.get(case_id(kernel, arg, how), (exc, pattern))
                if override is None:
                    continue
                exc, pattern = override
            out.append((kernel, arg, how, make, exc, pattern))
        return out

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        cls = type(self)
        params: dict[str, tuple[tuple[str, ...], list]] = {
            "test_guard_raises_before_launch": (("kernel", "arg", "how", "make", "exc", "pattern"), cls.guard_cases()),
            "test_valid_call_reaches_the_launcher": (("kernel",), [(k,) for k in cls.KERNELS]),
            **getattr(cls, "staging_params", lambda: {})(),
        }
        if metafunc.function.__name__ in params:
            names, cases = params[metafunc.function.__name__]
            assert cases, f"{cls.__name__}: no cases for {metafunc.function.__name__}"
            ids = ["-".join(str(x) for x in c[: min(3, len(c))]) for c in cases]
            if len(names) == 1:
                metafunc.parametrize(names[0], [c[0] for c in cases], ids=ids)
            else:
                metafunc.parametrize(names, cases, ids=ids)

    @pytest.fixture
    def module(self, load_kernel):
        """module(spec) -> the loaded module (the tests' `load_kernel`: a Triton module by default)."""
        return load_kernel

    def place(self, x: object) -> object:
        return x

    def trip(self, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace the module's launch with a `Tripwire` (the torch host part's `_launcher` by default)."""
        monkeypatch.setattr(call.module, "_launcher", Tripwire())

    def call(self, kernel: str, module) -> Call:
        spec = self.KERNELS[kernel]
        if self.FACE == DLPACK_JAX:
            return Call(spec, module(spec), entry="_torch", out=False, place=self.place)
        return Call(spec, module(spec), place=self.place)

    def test_guard_raises_before_launch(self, kernel, arg, how, make, exc, pattern, module, monkeypatch) -> None:
        call = self.call(kernel, module)
        if arg == "out":
            call.out = make(call)
        else:
            call.args[arg] = make(call)
        self.trip(call, monkeypatch)
        expect(call, exc, arg, pattern.format(**call.dtypes(), **self.DEVICE_WORDS))

    def test_valid_call_reaches_the_launcher(self, kernel: str, module, monkeypatch) -> None:
        """The tripwire is wired: the unbroken call of every case above gets as far as the launch."""
        call = self.call(kernel, module)
        self.trip(call, monkeypatch)
        with pytest.raises(Launched):
            call()


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
    ("bmm", "a", "batch stride", lambda c: batch_padded(c.args["a"], 4)),
    ("tma", "out", "stride", lambda c: padded_rows(c.out, 4)),
    ("bmm", "out", "batch stride", lambda c: batch_padded(c.out, 4)),
    ("tma", "scale_a", "strided", lambda c: strided(c.args["scale_a"])),
]

# Unusual but legal arguments: the per-call fast check hands them to the full validation, which accepts.
LEGAL: list[tuple[str, str, str, Break]] = [
    ("ptr", "alpha", "int", lambda c: 2),
    ("tma", "scale_a", "(M, 1)", lambda c: c.args["scale_a"].reshape(M, 1)),
    ("tma", "scale_b", "(1, N)", lambda c: c.args["scale_b"].reshape(1, N)),
    ("bias", "bias", "(N, 1)", lambda c: c.args["bias"].reshape(N, 1)),
    ("ptr", "b", "padded leading stride", lambda c: padded_rows(c.args["b"].t(), 3).t()),
    ("relu", "a", "padded leading stride", lambda c: padded_rows(c.args["a"], 1)),
    ("tma", "a", "16-byte padded rows", lambda c: padded_rows(c.args["a"], 8)),
    ("ptr", "c", "padded rows", lambda c: padded_rows(c.args["c"], 5)),
]

# The DLPack door refuses a (N, 1) bias (runtime/jax.py's `vector` takes (N,) or (1, N) for a column
# vector) where the torch host part accepts it: not listed for that face until the two agree.
DLPACK_JAX_REFUSES = {"bias-bias-(N, 1)"}


class StagingTests:
    """Legal odd layouts run, with the same bits as the plain call (mix in beside `GuardTests`)."""

    @classmethod
    def staging_params(cls) -> dict[str, tuple[tuple[str, ...], list]]:
        no_out = getattr(cls, "FACE", TORCH_HOST) == DLPACK_JAX
        return {
            "test_unaligned_inputs_are_staged": (("kernel", "arg", "how", "make"),
                                                 [c for c in STAGED if not (no_out and c[1] == "out")]),
            "test_legal_layouts_are_accepted": (("kernel", "arg", "how", "make"),
                                                [c for c in LEGAL if not (no_out and case_id(*c[:3]) in DLPACK_JAX_REFUSES)]),
        }

    def test_tma_rows_of_the_allocated_output(self, module) -> None:
        """With no `out`, an output whose rows are not 16-byte multiples (N = 20 f16: 40 bytes; a TMA
        kernel writes a padded buffer and returns a contiguous copy of it): the reference's values."""
        call = self.call("tma", module)
        b = layout(torch.randn(K, 20).to(call.args["b"].dtype), contiguous_dim(call.spec, "b"))
        scale_b = torch.rand(20)
        got = call.fn(call.args["a"], b, call.args["scale_a"], scale_b)
        assert got.shape == (M, 20) and got.is_contiguous()
        want = (call.args["a"].double() @ b.double()) * call.args["scale_a"].double()[:, None] * scale_b.double()
        tol = 1e-2 if got.dtype == torch.bfloat16 else 4e-3
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)

    def test_unaligned_inputs_are_staged(self, kernel, arg, how, make, module) -> None:
        """An input the kernel cannot read in place is copied, an output it cannot write is staged and
        copied back: the same bits as the aligned call, and nothing outside `out` written."""
        call = self.call(kernel, module)
        reference = call().clone()
        if arg == "out":
            call.out = make(call)
            call.out.fill_(float("nan"))
        else:
            call.args[arg] = make(call)
            call.out = torch.full_like(call.out, float("nan"))
        result = call()
        if call.takes_out:
            assert result is call.out
        assert torch.equal(result, reference)

    def test_legal_layouts_are_accepted(self, kernel, arg, how, make, module) -> None:
        call = self.call(kernel, module)
        reference = call().clone()
        call.args[arg] = make(call)
        call.out = torch.full_like(call.out, float("nan"))
        result = call()
        if arg == "alpha":  # 2 instead of 0.5
            a, b, c = (call.args[n].double() for n in "abc")
            torch.testing.assert_close(result.double(), 2 * (a @ b) + c, atol=2e-2, rtol=4e-3)
        else:
            assert torch.equal(result, reference)
