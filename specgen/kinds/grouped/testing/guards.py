"""The argument guards every grouped backend's torch entry runs before anything launches: subclass
`GroupedGuardTests`. Each case starts from a valid call, breaks one argument, and expects TypeError or
ValueError (NotImplementedError for a tensor that requires grad) whose message names the kernel and the
argument; the launch is a tripwire and a poisoned `out` comes back untouched.

A subclass gives `SPEC` (offs index, a per-group bias, a per-row scale named `router`: `specs.GUARD_SPEC`) and
the `module` fixture; `trip(module, monkeypatch)` replaces the module's launch (default: its `_launcher`)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from specgen.kinds.gemm.testing.data import torch_dtype

M, N, K, G = 20, 24, 32, 3


class Call:
    """A valid call of the guard spec's kernel: `args` by name (a, b, offs, bias, router), `out`."""

    def __init__(self, spec: dict, module: object) -> None:
        self.spec, self.fn = spec, getattr(module, spec["name"])
        g = torch.Generator().manual_seed(0)
        dt = torch_dtype(spec["a"]["dtype"])
        b = torch.randn(G, N, K, generator=g).to(dt).transpose(-1, -2)  # K-major: (G, K, N), K contiguous
        self.args: dict[str, object] = {
            "a": torch.randn(M, K, generator=g).to(dt), "b": b if spec["b"]["major"] == "k" else b.contiguous(),
            "offs": torch.tensor([5, 5, 17], dtype=torch.int32), "bias": torch.randn(G, N, generator=g).to(dt),
            "router": torch.rand(M, generator=g),
        }
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


class GroupedGuardTests:
    SPEC: dict = {}

    @pytest.fixture
    def module(self, load_kernel):
        return load_kernel

    def trip(self, module: object, monkeypatch: pytest.MonkeyPatch) -> None:
        def tripwire(*args: object, **kwargs: object) -> None:
            raise AssertionError("the kernel launched despite a bad argument")

        monkeypatch.setattr(module, "_launcher", tripwire)

    @pytest.mark.parametrize(("case", "breaks", "error", "pattern"), CASES, ids=[c[0] for c in CASES])
    def test_bad_argument_is_refused_before_launch(self, case, breaks, error, pattern, module, monkeypatch):
        mod = module(self.SPEC)
        call = Call(self.SPEC, mod)
        self.trip(mod, monkeypatch)
        with pytest.raises(error, match=re.escape(self.SPEC["name"]) + ".*" + pattern):
            call(**breaks(call))
        assert call.out.isnan().all(), "out was written"
