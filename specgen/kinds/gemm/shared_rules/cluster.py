"""Thread-block cluster sizes (the target's row says whether its backend launches clusters)."""

from __future__ import annotations

from collections.abc import Iterator

from specgen.rules.base import Finding, RuleContext, RuleSet, is_gpu, pow2

RULES = RuleSet()

# --- clusters -------------------------------------------------------------------------------------------
@RULES.rule("CLU001", "cluster size", is_gpu)
def cluster_size(ctx: RuleContext) -> Iterator[Finding]:
    """Portable clusters hold at most 8 CTAs; sm90 allows 16 with the non-portable opt-in and 17 fails
    (measured, cudaOccupancyMaxPotentialClusterSize). Triton and Pallas TPU launch no clusters; Pallas
    Mosaic GPU launches the pairs PAL007 allows."""
    c = ctx.spec.cluster
    if c.size == 1:
        return
    if not ctx.info.clusters:
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n} is ignored by {ctx.backend} (it launches single CTAs)",
                      "", ("cluster",))
        return
    assert ctx.gpu is not None
    if c.size > ctx.gpu.cluster_max:
        yield Finding("CLU001", "error", f"cluster {c.m}x{c.n} = {c.size} CTAs > {ctx.gpu.cluster_max}, the hardware maximum",
                      "", ("cluster",))
    elif c.size > ctx.gpu.cluster_portable:
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n} = {c.size} CTAs > {ctx.gpu.cluster_portable} (portable): "
                      "needs the non-portable opt-in", "", ("cluster",))
    if not (pow2(c.m) and pow2(c.n)):
        yield Finding("CLU001", "warning", f"cluster {c.m}x{c.n}: the CuTe examples use powers of two (convention, "
                      "not hardware)", "", ("cluster",))
