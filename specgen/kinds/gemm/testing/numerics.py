"""The numerics every GEMM backend's tests run: subclass `NumericsTests` as `Test<Backend>Numerics`.

Each case runs a rendered kernel on fresh seeded data (`data.Problem`) with the output (and the padding
around every operand) poisoned: every output element must be written, nothing outside the output may be,
no input may be touched, and the result must match the float64 reference (`reference.py`) within a
tolerance tight enough to see every epilogue op: the reference with any one op dropped fails it (but for
a cast it cannot see: `data.cast_within_tolerance`), and so does the other GELU form where the out dtype
is f32; a gated op read with the other layout or another fn fails it too (`data.gated_mutants`). The
shapes a backend lists cover ragged M / N / K (not tile multiples), M = 1, K tails (K smaller than tile.k,
several K steps ending in a tail) and strided operands.

A subclass says which kernels and shapes, how to load a module and how to call it:

- `VARIANTS`: name -> spec (plain data, every default spelled out);
- `cases()`: the (variant, shape) pairs to run (default: every variant on every shape of `SHAPES`);
- `problem(spec, shape)`: the `data.Problem` for one case (default: `SHAPES[shape]` as (M, N, K, layout));
- the `module` fixture: `module(spec)` -> the loaded module;
- `run(module, spec, a, b, args, out)`: the call, returning the result (`out` may be None: allocate);
- `WRITES_OUT`: the entry writes the caller's `out` (torch launchers) or returns a new array (JAX);
- `MUTANT_SHAPES`: the shapes the dropped-op checks run on (None: all);
- `EXACT`: variants run on exactly representable data; `check_module(spec, module)`: backend checks.
"""

from __future__ import annotations

import pytest
import torch

from specgen.kinds.gemm.testing.data import (
    Problem,
    cast_within_tolerance,
    gated_mutants,
    outside,
    poison,
    tolerance,
    torch_dtype,
)
from specgen.kinds.gemm.testing.reference import REFERENCES


class NumericsTests:
    VARIANTS: dict[str, dict] = {}
    SHAPES: dict[str, tuple] = {}
    EXACT: frozenset[str] = frozenset()
    WRITES_OUT = True
    MUTANT_SHAPES: frozenset[str] | None = None
    DEVICE = "cpu"

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        return [(v, s) for s in cls.SHAPES for v in cls.VARIANTS]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if metafunc.function.__name__ == "test_matches_float64_reference":
            cases = type(self).cases()
            assert cases, f"{type(self).__name__} lists no numerics cases"
            metafunc.parametrize(("variant", "shape"), cases, ids=[f"{s}-{v}" for v, s in cases])

    def problem(self, spec: dict, shape: str) -> Problem:
        M, N, K, layout = self.SHAPES[shape]
        return Problem(spec, M, N, K, layout, aligned=False, exact=spec["name"] in self.EXACT,
                       vectors_2d=shape == "ksmall", tag=shape, device=self.DEVICE)

    def check_module(self, spec: dict, module: object) -> None:
        """Backend-specific checks of a loaded module before it runs (none by default)."""

    def run(self, module: object, spec: dict, a: torch.Tensor, b: torch.Tensor, args: list[tuple[str, object]],
            out: torch.Tensor | None) -> torch.Tensor:
        """The torch launchers' call: `name(a, b, *args, out=out)`."""
        return getattr(module, spec["name"])(a, b, *(value for _, value in args), out=out)

    @pytest.fixture
    def module(self, load_kernel):
        """module(spec) -> the loaded module (the tests' `load_kernel`: a Triton module by default)."""
        return load_kernel

    def test_matches_float64_reference(self, variant: str, shape: str, module) -> None:
        spec = self.VARIANTS[variant]
        mod = module(spec)
        self.check_module(spec, mod)
        case = self.problem(spec, shape)
        a, b, stores = case.operands()
        args, arg_stores = case.epilogue_args()
        out, out_store = case.out()
        inputs = [store.clone() for store in stores + arg_stores]

        result = self.run(mod, spec, a, b, args, out)

        if self.WRITES_OUT:
            assert result is out
        assert result.dtype == torch_dtype(spec["out"]["dtype"])
        assert tuple(result.shape) == case.batch + (case.M, case.N)
        poisoned = poison(result.dtype)
        if result.dtype.is_floating_point:
            unwritten = result.isnan()
            assert not unwritten.any(), f"{int(unwritten.sum())} of {result.numel()} output elements never written"
            assert outside(out, out_store).isnan().all(), "the kernel wrote outside the output"
        else:
            assert not (result == poisoned).any(), "output elements never written"
            assert (outside(out, out_store) == poisoned).all(), "the kernel wrote outside the output"
        for store, before in zip(stores + arg_stores, inputs, strict=True):  # nor touched its inputs
            torch.testing.assert_close(store, before, rtol=0, atol=0, equal_nan=True)
        tol = tolerance(spec, exact=case.exact)
        a64, b64 = a.cpu(), b.cpu()
        kwargs = {n: v.cpu() if isinstance(v, torch.Tensor) else v for n, v in args}
        got = result.cpu().double()
        want = REFERENCES[spec["kind"]](spec["epilogue"], a64, b64, kwargs)
        torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{variant} {shape}: {m}")

        # The tolerance is tight enough to see every op: dropping any one from the reference must fail it,
        # and so must the other GELU form where the out dtype is f32.
        if self.MUTANT_SHAPES is None or shape in self.MUTANT_SHAPES:
            chain = spec["epilogue"]
            for i, op in enumerate(chain):
                mutants = []
                if op["op"] == "gated":  # dropping it leaves 2N columns: read it wrongly instead
                    mutants += [(how, chain[:i] + [wrong] + chain[i + 1:]) for how, wrong in gated_mutants(spec, op, case.N)]
                elif not (op["op"] == "cast" and cast_within_tolerance(spec, op, tol)):
                    mutants.append(("dropped", chain[:i] + chain[i + 1:]))
                if op["op"] == "activation" and op["fn"] in ("gelu", "gelu_tanh") and spec["out"]["dtype"] == "f32":
                    other = {**op, "fn": "gelu" if op["fn"] == "gelu_tanh" else "gelu_tanh"}
                    mutants.append((f"as {other['fn']}", chain[:i] + [other] + chain[i + 1:]))
                for how, mutant in mutants:
                    wrong = REFERENCES[spec["kind"]](mutant, a64, b64, kwargs)
                    assert not torch.allclose(got, wrong, **tol), f"{variant} {shape}: epilogue[{i}] {op} {how} passes"

        if shape == "ragged":  # allocating the output gives the same bits
            again = self.run(mod, spec, a, b, args, None)
            assert again.is_contiguous() and torch.equal(again, result)
