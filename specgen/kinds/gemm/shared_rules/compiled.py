"""How the compiler settles a GEMM rule's near-boundary verdict (specgen/settle.py): each function reads
one compile probe (specgen/probe.py: `error`, `smem`, `registers`, `spill_bytes`) and returns why the
compiler refuses the config, "" where it accepts it, or None where the probe does not say."""

from __future__ import annotations

from collections.abc import Callable

from specgen.rules.finding import ProbeResult


def spills(probe: ProbeResult) -> str | None:
    """REG001: ptxas' spill stores (bytes of STL in the SASS), or a config that does not compile."""
    spilled = probe.get("spill_bytes")
    if spilled:
        registers = f", {probe['registers']} registers a thread" if probe.get("registers") else ""
        return f"{spilled} bytes spilled (ptxas{registers})"
    if spilled is not None:
        return ""
    # no spill figure: a compile that built nothing is a refusal; one whose SASS went unread says nothing
    return f"the config does not compile: {probe['error']}" if probe.get("error") and "smem" not in probe else None


def smem_within(capacity: int) -> Callable[[ProbeResult], str | None]:
    """SMEM001: the shared memory the compiled kernel allocates against the block's `capacity`."""
    def decide(probe: ProbeResult) -> str | None:
        smem = probe.get("smem")
        if isinstance(smem, int):
            return f"the compiler allocates {smem} B of SMEM > {capacity} B per block" if smem > capacity else ""
        return f"the config does not compile: {probe['error']}" if probe.get("error") else None

    return decide


def lowers(probe: ProbeResult) -> str | None:
    """A lowering limit (Mosaic GPU): whether the installed compiler lowers the config."""
    error = probe.get("error")
    if error is None:
        return None
    return f"the installed compiler does not lower it: {error}" if error else ""
