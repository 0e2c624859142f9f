"""The GEMM kind's guard tests (specgen/kinds/gemm/testing/guards.py) on the Triton design's modules, under
the CPU interpreter (everything lives on the CPU there; 'meta' stands for any other device), and what only
pointer kernels have: 32-bit offsets within a matrix."""

from __future__ import annotations

import pytest
import torch

from backends.triton.variants import KERNELS
from specgen.kinds.gemm.testing.guards import GuardTests, StagingTests, contiguous_dim, expect, padded_rows

# The interpreter's sigmoid (in the legal-layout calls) warns where exp overflows; the result is exact.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


def _span(x: torch.Tensor, cdim: int) -> int:
    """Elements a pointer kernel's 32-bit offsets must reach: outer extent x leading stride."""
    lead = -2 if cdim == -1 else -1
    return x.shape[lead] * x.stride(lead)


def _widen(x: torch.Tensor, cdim: int) -> torch.Tensor:
    """x with a leading stride 64 elements wider (same values, same major mode)."""
    if cdim == -1:
        return padded_rows(x, 64)
    return padded_rows(x.transpose(-1, -2).contiguous(), 64).transpose(-1, -2)


class TestTritonGuards(GuardTests, StagingTests):
    KERNELS = KERNELS

    @pytest.mark.parametrize(("kernel", "arg"), [("ptr", "a"), ("relu", "b"), ("ptr", "c"), ("relu", "out"), ("bmm_res", "a")])
    def test_pointer_kernels_refuse_matrices_past_32_bit_offsets(self, kernel, arg, load_kernel, monkeypatch) -> None:
        """Pointer kernels index within one matrix in 32 bits: a matrix spanning 2**31 elements or more
        would wrap silently, so the guards refuse it. The limit is lowered (the fast check and the full
        validation both read it at call time) to just above every other matrix's span, and `arg` widened
        past it, instead of allocating 4 GiB."""
        import specgen.runtime.guards as guards

        call = self.call(kernel, load_kernel)
        tensors = {**{k: v for k, v in call.args.items() if isinstance(v, torch.Tensor) and v.dim() >= 2}, "out": call.out}
        limit = max(_span(x, contiguous_dim(call.spec, k)) for k, x in tensors.items() if k != arg) + 1
        wide = _widen(tensors[arg], contiguous_dim(call.spec, arg))
        assert _span(wide, contiguous_dim(call.spec, arg)) >= limit
        if arg == "out":
            call.out = wide
        else:
            call.args[arg] = wide
        monkeypatch.setattr(guards, "INT32_SPAN", limit)
        self.trip(call, monkeypatch)
        expect(call, ValueError, arg, r"indexes within a matrix in 32 bits")

    def test_int32_span_guard_boundary(self) -> None:
        from specgen.runtime.guards import INT32_SPAN, int32_span

        int32_span("k", "a", 2**16, 2**15 - 1)  # 2**31 - 2**16 elements: fine
        with pytest.raises(ValueError, match=r"k: argument 'a' spans 65536 x 32768 = 2147483648 elements"):
            int32_span("k", "a", 2**16, 2**15)
        assert INT32_SPAN == 2**31


def test_tma_rows_off_16_bytes_are_staged_not_written_in_place() -> None:
    """A view of a wider buffer whose rows are 16-byte multiples but whose extent is not (N = 29 bf16 of 32): a
    TMA store moves a row's last 16 bytes whole and wrote the caller's columns past N on an H200 (CuTe and Triton
    alike), so the guards stage it; a pointer kernel keeps it in place, and so does a TMA load."""
    from specgen.runtime import guards
    from specgen.runtime.triton.training import tma_operand

    buf = torch.full((5, 32), float("nan"), dtype=torch.bfloat16)
    view, whole = buf[:, :29], buf[:, :24]
    assert guards._needs_copy(view, 1, True, store=True) and not guards._needs_copy(view, 1, False, store=True)
    assert not guards._needs_copy(whole, 1, True, store=True)
    assert guards._needs_copy(buf[:, :29].t(), 0, True, store=True)  # the same rows as an M-major matrix
    # TMA loads stop at the extent (on an H200, NaN past it read in place gave none): an input stays in place
    assert not guards._needs_copy(view, 1, True) and guards.readable(view, 1, tma=True) is view
    out, result = guards.output("k", view, torch.bfloat16, (5, 29), -1, view, tma=True)
    assert result is view and out is not view and out.stride(0) * 2 % 16 == 0
    out, result = guards.output("k", view, torch.bfloat16, (5, 29), -1, view, tma=False)
    assert out is view
    assert tma_operand(view, 16, 16, store=True) is None and tma_operand(whole, 16, 16, store=True) is not None
    assert tma_operand(view, 16, 16) is not None
