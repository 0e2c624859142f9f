"""What `specgen bench` prints and draws: a rich table per target (ratio with its interval, both times,
TFLOP/s, % of peak; the A/A row first), `--compare A.json B.json` (what moved, and whether beyond the
two runs' intervals), and a PNG of ratio per shape per target (the `plot` extra: matplotlib)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from specgen.bench.record import BenchRecord, Row
from specgen.bench.stats import geomean


def _shape(r: Row) -> str:
    return ("" if r.batch == 1 else f"{r.batch}x") + "x".join(map(str, r.shape))


def tables(record: BenchRecord) -> list[Table]:
    env = record.environment
    out = []
    geo = record.geomeans()
    for target in dict.fromkeys(r.target for r in record.rows):
        rows = [r for r in record.rows if r.target == target]
        t = Table(title=f"{target} on {env.gpu} (driver {env.driver}, {env.date}, L2 flushed by {env.l2_flush}): "
                  "ratio = peer / ours, > 1 ours faster",
                  caption=f"geomean {geo[target]:.3f}x over {sum(r.kind == 'kernel' for r in rows)} rows"
                  if target in geo else None)
        for col in ("kernel", "shape", "config", "peer", "ratio (95% CI)", "ours us", "peer us", "TFLOP/s", "% peak"):
            t.add_column(col, justify="left" if col in ("kernel", "shape", "config", "peer") else "right")
        for r in sorted(rows, key=lambda r: r.kind != "aa"):
            t.add_row("A/A: " + r.peer if r.kind == "aa" else r.kernel, _shape(r), r.variant, r.peer,
                      f"{r.ratio:.3f} ({r.ratio_lo:.3f}-{r.ratio_hi:.3f})", f"{r.ours_us:.1f}", f"{r.peer_us:.1f}",
                      f"{r.ours_tflops:.0f}", "" if r.pct_peak is None else f"{r.pct_peak:.0f}%")
        out.append(t)
    return out


def _key(r: Row) -> tuple:
    return (r.kind, r.kernel, r.target, r.shape, r.batch)


def compare(a: BenchRecord, b: BenchRecord) -> tuple[Table, list[str]]:
    """Rows of both records side by side, B's ratio over A's: "moved" where the intervals do not overlap.
    Also what only one of them measured, and each target's geomean in both."""
    rows_a, rows_b = {_key(r): r for r in a.rows}, {_key(r): r for r in b.rows}
    t = Table(title=f"A: {a.environment.gpu} {a.environment.date}   B: {b.environment.gpu} {b.environment.date}")
    for col in ("kernel", "target", "shape", "A ratio", "B ratio", "B / A", ""):
        t.add_column(col, justify="left" if col in ("kernel", "target", "shape", "") else "right")
    for key in (k for k in rows_a if k in rows_b):
        ra, rb = rows_a[key], rows_b[key]
        moved = rb.ratio_lo > ra.ratio_hi or rb.ratio_hi < ra.ratio_lo
        verdict = ("faster" if rb.ratio > ra.ratio else "slower") if moved else "same"
        t.add_row(("A/A " if ra.kind == "aa" else "") + ra.kernel, ra.target, _shape(ra), f"{ra.ratio:.3f}",
                  f"{rb.ratio:.3f}", f"{rb.ratio / ra.ratio:.3f}", verdict)
    notes = [f"only in {side}: {r.kernel} @ {r.target} {_shape(r)}"
             for side, mine, other in (("A", rows_a, rows_b), ("B", rows_b, rows_a))
             for k, r in mine.items() if k not in other]
    if a.environment.l2_flush != b.environment.l2_flush:  # a streaming kernel's ratio moves with the flush alone
        notes.insert(0, f"A flushed the L2 by {a.environment.l2_flush}, B by {b.environment.l2_flush}: ratios of "
                     "kernels that stream DRAM differ between the two flushes whatever the code (specgen bench --flush)")
    ga, gb = a.geomeans(), b.geomeans()
    for target in (t for t in ga if t in gb):
        shared = [k for k in rows_a if k in rows_b and k[0] == "kernel" and k[2] == target]
        if shared:
            same_a = geomean(rows_a[k].ratio for k in shared)
            same_b = geomean(rows_b[k].ratio for k in shared)
            notes.append(f"{target}: geomean over the {len(shared)} shared rows {same_a:.3f}x -> {same_b:.3f}x")
    return t, notes


def print_record(record: BenchRecord, console: Console) -> None:
    for t in tables(record):
        console.print(t)


def plot(record: BenchRecord, path: Path) -> None:
    """A PNG: one bar per (kernel, shape), grouped by target, the A/A rows drawn as the band around 1."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("--png needs matplotlib: pip install 'specgen[plot]'") from e
    targets = list(dict.fromkeys(r.target for r in record.rows))
    fig, axes = plt.subplots(len(targets), 1, figsize=(12, 3 + 0.25 * len(record.rows)), squeeze=False)
    for ax, target in zip(axes[:, 0], targets, strict=True):
        rows = [r for r in record.rows if r.target == target and r.kind == "kernel"]
        aa = [r for r in record.rows if r.target == target and r.kind == "aa"]
        labels = [f"{r.kernel} {_shape(r)}" for r in rows]
        ax.barh(labels, [r.ratio - 1 for r in rows], left=1,
                xerr=[[r.ratio - r.ratio_lo for r in rows], [r.ratio_hi - r.ratio for r in rows]])
        for r in aa:
            ax.axvspan(r.ratio_lo, r.ratio_hi, alpha=0.2, color="grey")
        ax.axvline(1, color="black", linewidth=0.8)
        ax.set_title(f"{target}: peer / ours (> 1: specgen faster); grey: A/A interval")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
