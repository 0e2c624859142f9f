"""Rules every design answers in its own way: the rule is shared (its id, where it applies), the
verdict is the design's (`register_findings`, `option_findings`, `renders_split_k`; design.py).
Where each applies comes from the registry: the designs that serve the target."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from specgen.registry import DESIGNS, DesignBase, design_for
from specgen.rules.base import Applies, Finding, RuleContext, RuleSet, any_target, info_of
from specgen.spec.models import Target
from specgen.targets import TargetInfo

RULES = RuleSet()
KINDS = tuple(sorted({d.kind for d in DESIGNS}))


def _served_by(pred: Callable[[DesignBase, TargetInfo], bool]) -> Applies:
    def applies(t: Target | TargetInfo) -> bool:
        info = info_of(t)
        return any(d is not None and pred(d, info) for d in (design_for(k, info) for k in KINDS))

    return applies


@RULES.rule("REG001", "accumulator register pressure", _served_by(lambda d, info: d.has_register_model(info)))
def register_pressure(ctx: RuleContext) -> Iterator[Finding]:
    """The register-resident accumulator against the registers a thread has (255; wgmma holds N/2 fp32
    registers per thread per 64-row atom, cutlass `mma_sm90_gmma.hpp`), by each design's own register
    model: the Triton design warns where ptxas will likely spill (gemm_triton/rules.py), the CuTe sm90
    design counts the epilogue's live operands against setmaxnreg (gemm_cute_sm90/rules.py), the Mosaic
    GPU kernel errs above 255 and warns above 192 (gemm_pallas/rules.py). Designs whose accumulator lives
    in TMEM, or on a TPU, have none."""
    yield from ctx.design.register_findings(ctx)


@RULES.rule("SPK001", "split-K where a design renders it", _served_by(lambda d, info: not d.renders_split_k))
def split_k_design(ctx: RuleContext) -> Iterator[Finding]:
    """`schedule.split_k > 1` needs a kernel that divides the K loop and a launcher that reduces the
    partials: designs that render both say `renders_split_k` (the Triton design's kernel and launcher,
    the CuTe sm90 design's cluster of K splits); the others render one K loop per tile, so a split there
    would be dropped silently."""
    k = ctx.spec.schedule.split_k
    if k > 1:
        where = sorted(d.name for d in DESIGNS if d.renders_split_k)
        yield Finding("SPK001", "error", f"schedule.split_k = {k}: the {ctx.design.name} design renders no split-K "
                      f"(the {' and '.join(where)} designs do)", f'set schedule.split_k = 1 for {ctx.target} (a per_target table)',
                      ("schedule", "split_k"))


@RULES.rule("OPT001", "backend options the target can honour", any_target)
def backend_options(ctx: RuleContext) -> Iterator[Finding]:
    """Each backend's options are read by that backend's targets only (a `triton` table on a spec that
    lists no Triton target is inert, not an error). Within a backend, an option the target cannot
    honour is an error, and one that the spec's own settings switch off a warning: each design says which
    (`option_findings`): CuTe's `two_cta` is Blackwell's cta_group::2 tcgen05 MMA (sm100 only, PTX ISA
    tcgen05), its `mma_warpgroups` and `schedule = "pingpong"` split or alternate wgmma warpgroups (sm90
    only); Pallas's `vmem_limit_bytes` is Mosaic TPU's scoped-VMEM limit (no VMEM on Mosaic GPU) and its
    `swap_ab` swaps Mosaic GPU's wgmma operands (no wgmma on a TPU); Triton's
    subtiled store is a TMA store (`triton.tma`), its `flatten` pipelines a persistent kernel's tile loop."""
    yield from ctx.design.option_findings(ctx)
