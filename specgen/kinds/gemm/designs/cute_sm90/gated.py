"""A gated epilogue (SwiGLU, GeGLU: out = act(gate) * up) on the CuTe designs, dense and grouped, sm90 and sm100.

Every CuTe kernel loads it the same way (templates/gemm/cute/gated.jinja `_gated_view`): B, torch's (K, 2N) (or
(L, K, 2N), a batch or the groups), is viewed as (N, K, 2, L), the third mode picking the gate (0) or up (1)
columns (halves: the up columns N on; interleaved: gate j at column 2j, up j at 2j + 1), so one TMA descriptor
loads a gate and an up tile of tile.n columns each a stage into two SMEM buffers (sB, sU), and TMA zero-fills past
N for both. The MMAs run twice over the same A tile into two accumulators of one layout (sm90: two register
fragments; sm100: two TMEM accumulators side by side), so the epilogue pairs gate and up element by element.

What the kernels do not load is refused by EPI003 (specgen/kinds/gemm/shared_rules/gated.py), which reads
`gated_limits`; a render that skipped check raises instead of emitting a wrong kernel (`refuse_unrendered`)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.spec.epilogue import gated_op


def gated_limits(spec: object, tmem: bool) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(message, fix, field) for each configuration a CuTe kernel's gated epilogue does not render (none without a
    gated op). B K-major only: an N-major B's interleaved gate and up columns are every other element of a row (a
    TMA box has a unit innermost stride), and its halves put the up tile N elements after the gate's, a TMA stride
    that must be a multiple of 16 bytes (N a multiple of 8 for 16-bit B: a shape, unknown at check). The dense sm90
    kernel's `cute.swap_ab` transposes one accumulator back, not two, and its split-K sums one accumulator's
    partials through SMEM, not gate and up; the dense sm100 kernel's 2-CTA MMA splits B's columns between the pair
    (its up tile would be the partner's half; `tmem`: the target has tensor memory, so the spec's MMA is tcgen05):
    these are refused rather than rendered wrong."""
    op = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    if op is None:
        return
    if spec.b.major != "k":  # type: ignore[attr-defined]
        yield (f"a gated epilogue ({op.layout}) with b.major = \"{spec.b.major}\": the CuTe kernels load the gate and "  # type: ignore[attr-defined]
               "up tiles of a K-major B (an N-major B's gate and up columns are no TMA box of their own: every other "
               "element of a row, or at an offset of N columns that TMA needs a multiple of 16 bytes)",
               'use b = { major = "k" } (the (2N, K) weight passed as w.t()), or a triton target', ("b", "major"))
    if getattr(spec.cute, "swap_ab", False):  # type: ignore[attr-defined]
        yield ("cute.swap_ab = true with a gated epilogue: the swapped kernel transposes one accumulator back, not "
               "gate and up", "set cute.swap_ab = false", ("cute", "swap_ab"))
    split = getattr(spec.schedule, "split_k", 1)  # type: ignore[attr-defined]
    if split > 1:
        yield (f"schedule.split_k = {split} with a gated epilogue: the split-K reduction sums one accumulator's "
               "partials, not gate and up", "set schedule.split_k = 1", ("schedule", "split_k"))
    if tmem and spec.cute.two_cta:  # type: ignore[attr-defined]
        yield ("cute.two_cta = true with a gated epilogue: a 2-CTA MMA splits B's columns between the pair, and the "
               "gated kernel's up tile is its own CTA's", "set cute.two_cta = false", ("cute", "two_cta"))


def refuse_unrendered(spec: object, tmem: bool) -> None:
    """Raise where check would have refused the spec (EPI003): a render that skipped check emits no wrong kernel."""
    for message, _, _ in gated_limits(spec, tmem):
        raise ValueError(f"{spec.name}: {message} (EPI003)")  # type: ignore[attr-defined]


def gated_fields(spec: object) -> dict[str, object]:
    """The plan's gated fields: whether the chain opens with a gated op, and its layout ("" without one)."""
    op = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    return {"gated": op is not None, "gated_layout": op.layout if op is not None else ""}


def b_columns_doc(spec: object) -> str:
    """What a gated B's 2N columns hold, for the module docstring (empty without a gated op)."""
    op = gated_op(spec.epilogue)  # type: ignore[attr-defined]
    if op is None:
        return ""
    return ": gate columns [0, N), up columns [N, 2N)" if op.layout == "halves" else ": column 2j gate j, 2j + 1 up j"
