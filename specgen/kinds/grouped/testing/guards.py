"""The argument guards every grouped backend's torch entry runs before anything launches: subclass
`GroupedGuardTests`. Each case starts from a valid call, breaks one argument, and expects TypeError or
ValueError (NotImplementedError for a tensor that requires grad) whose message names the kernel and the
argument; the launch is a tripwire and a poisoned `out` comes back untouched.

A subclass gives `SPEC` (offs index, a per-group bias, a per-row scale named `router`: `specs.GUARD_SPEC`; or the
fp8 one, `specs.FP8_GUARD_SPEC`, with `CASES = FP8_CASES`) and the `module` fixture; `trip(module, monkeypatch)` replaces the module's launch (default: its `_launcher`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from specgen.kinds.gemm.testing.data import torch_dtype
from specgen.kinds.grouped.epilogue import GROUP_N
from specgen.kinds.grouped.spec import GroupedSpec

M, N, K, G = 20, 24, 32, 3


class Call:
    """A valid call of the guard spec's kernel: `args` by name (a, b, offs, then the epilogue's: (G, N) ones drawn
    normal in their dtype, (M,) ones in [0, 1), scalars 0.5), `out`."""

    def __init__(self, spec: dict, module: object) -> None:
        self.spec, self.fn = spec, getattr(module, spec["name"])
        g = torch.Generator().manual_seed(0)
        b = torch.randn(G, N, K, generator=g).to(torch_dtype(spec["b"]["dtype"])).transpose(-1, -2)  # K-major (G, K, N)
        self.args: dict[str, object] = {
            "a": torch.randn(M, K, generator=g).to(torch_dtype(spec["a"]["dtype"])),
            "b": b if spec["b"]["major"] == "k" else b.contiguous(), "offs": torch.tensor([5, 5, 17], dtype=torch.int32),
        }
        for arg in GroupedSpec.model_validate(spec).runtime_args():
            self.args[arg.name] = (torch.randn(G, N, generator=g).to(torch_dtype(arg.dtype.value)) if arg.shape == GROUP_N
                                   else torch.rand(M, generator=g) if arg.shape == "vec_m" else 0.5)
        self.out = torch.full((M, N), float("nan"), dtype=torch_dtype(spec["out"]["dtype"]))

    def __call__(self, **changes: object) -> object:
        args = {**self.args, **{k: v for k, v in changes.items() if k != "out"}}
        return self.fn(*args.values(), out=changes.get("out", self.out))


# (case, the argument it breaks: how, the error, a pattern the message must hold)
CASES: list[tuple[str, Callable[[Call], dict], type[Exception], str]] = [
    ("a_not_a_tensor", lambda c: {"a": [[1.0]]}, TypeError, "argument 'a' must be a torch.Tensor, got list"),
    ("a_dtype", lambda c: {"a": c.args["a"].double()}, TypeError, "argument 'a' must have dtype torch.float16"),
    ("a_rank", lambda c: {"a": c.args["a"][None]}, ValueError, "argument 'a' must have 2 dims"),
    ("a_major", lambda c: {"a": c.args["a"].t().contiguous().t()}, ValueError,
     "argument 'a' must be contiguous along dim 1"),
    ("b_rank", lambda c: {"b": c.args["b"][0]}, ValueError, "argument 'b' must have 3 dims"),
    ("b_major", lambda c: {"b": c.args["b"].contiguous()}, ValueError, "argument 'b' must be contiguous along dim 1"),
    ("b_k", lambda c: {"b": c.args["b"][:, :-1]}, ValueError, r"b.shape\[1\] \(K\) = 31 must equal a.shape\[1\] = 32"),
    ("offs_int64", lambda c: {"offs": c.args["offs"].long()}, TypeError, "argument 'offs' must be int32"),
    ("offs_float", lambda c: {"offs": c.args["offs"].float()}, TypeError, "argument 'offs' must be int32"),
    ("offs_length", lambda c: {"offs": torch.tensor([5, 17], dtype=torch.int32)}, ValueError,
     r"argument 'offs' must have shape \(3,\), one value per group of b"),
    ("offs_rank", lambda c: {"offs": c.args["offs"][None]}, ValueError, r"argument 'offs' must have shape \(3,\)"),
    ("offs_device", lambda c: {"offs": c.args["offs"].to("meta")}, ValueError, "argument 'offs' must be on cpu"),
    ("offs_not_a_tensor", lambda c: {"offs": [5, 5, 17]}, TypeError, "argument 'offs' must be a torch.Tensor"),
    ("bias_shape", lambda c: {"bias": c.args["bias"][0]}, ValueError,
     r"argument 'bias' must have shape \(G, N\) = \(3, 24\), one row per group"),
    ("bias_dtype", lambda c: {"bias": c.args["bias"].float()}, TypeError, "argument 'bias' must have dtype"),
    ("router_length", lambda c: {"router": c.args["router"][:-1]}, ValueError, "argument 'router' must hold M = 20"),
    ("out_shape", lambda c: {"out": c.out[:-1]}, ValueError, r"argument 'out' must have shape \(20, 24\)"),
    ("out_dtype", lambda c: {"out": c.out.float()}, TypeError, "argument 'out' must have dtype"),
    ("grad", lambda c: {"a": c.args["a"].float().requires_grad_().half()}, NotImplementedError,
     "argument 'a' requires grad"),
]


# The fp8 kernel's own (specs.FP8_GUARD_SPEC: e4m3 A and B, torch._scaled_grouped_mm's scale_a (M,), scale_b (G, N)).
FP8_CASES: list[tuple[str, Callable[[Call], dict], type[Exception], str]] = [
    ("a_not_fp8", lambda c: {"a": c.args["a"].half()}, TypeError, "argument 'a' must have dtype torch.float8_e4m3fn"),
    ("b_e5m2", lambda c: {"b": c.args["b"].to(torch.float8_e5m2)}, TypeError,
     "argument 'b' must have dtype torch.float8_e4m3fn"),
    ("b_n_major", lambda c: {"b": c.args["b"].contiguous()}, ValueError, "argument 'b' must be contiguous along dim 1"),
    ("scale_a_dtype", lambda c: {"scale_a": c.args["scale_a"].double()}, TypeError,
     "argument 'scale_a' must have dtype torch.float32"),
    ("scale_a_length", lambda c: {"scale_a": c.args["scale_a"][:-1]}, ValueError, "argument 'scale_a' must hold M = 20"),
    ("scale_a_per_group", lambda c: {"scale_a": c.args["scale_b"]}, ValueError, "argument 'scale_a' must hold M = 20"),
    ("scale_a_device", lambda c: {"scale_a": c.args["scale_a"].to("meta")}, ValueError,
     "argument 'scale_a' must be on cpu"),
    ("scale_b_dense_shape", lambda c: {"scale_b": c.args["scale_b"][0]}, ValueError,
     r"argument 'scale_b' must have shape \(G, N\) = \(3, 24\), one row per group; got \(24,\)"),
    ("scale_b_transposed", lambda c: {"scale_b": c.args["scale_b"].t()}, ValueError,
     r"argument 'scale_b' must have shape \(G, N\) = \(3, 24\)"),
    ("scale_b_dtype", lambda c: {"scale_b": c.args["scale_b"].bfloat16()}, TypeError,
     "argument 'scale_b' must have dtype torch.float32"),
    ("scale_b_device", lambda c: {"scale_b": c.args["scale_b"].to("meta")}, ValueError,
     "argument 'scale_b' must be on cpu"),
    ("scale_b_not_a_tensor", lambda c: {"scale_b": 1.0}, TypeError, "argument 'scale_b' must be a torch.Tensor"),
]


class GroupedGuardTests:
    SPEC: dict = {}
    CASES = CASES  # a subclass may give its spec's own

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if metafunc.function.__name__ == "test_bad_argument_is_refused_before_launch":
            cases = type(self).CASES
            metafunc.parametrize(("case", "breaks", "error", "pattern"), cases, ids=[c[0] for c in cases])

    @pytest.fixture
    def module(self, load_kernel):
        return load_kernel

    def trip(self, module: object, monkeypatch: pytest.MonkeyPatch) -> None:
        def tripwire(*args: object, **kwargs: object) -> None:
            raise AssertionError("the kernel launched despite a bad argument")

        monkeypatch.setattr(module, "_launcher", tripwire)

    def test_bad_argument_is_refused_before_launch(self, case, breaks, error, pattern, module, monkeypatch):
        mod = module(self.SPEC)
        call = Call(self.SPEC, mod)
        self.trip(mod, monkeypatch)
        with pytest.raises(error, match=re.escape(self.SPEC["name"]) + ".*" + pattern):
            call(**breaks(call))
        assert call.out.isnan().all(), "out was written"
