"""The bench run: for each spec, each target this GPU runs, each shape: our kernel and its peer in one
paired cycle (timing.py), and an A/A row per target (the peer against itself: the resolution of every
ratio in that table). The GPU side (modules, inputs, peers) sits behind `Workloads`, so the orchestration
runs on a CPU with a fake timer and fake workloads in the tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from specgen.bench.peak import peak_tflops
from specgen.bench.problem import ProblemShape, problem_of, shape_text
from specgen.bench.record import BenchRecord, Environment, Row, tflops
from specgen.bench.shapes import default_shapes, slot_for, slot_label
from specgen.bench.stats import paired
from specgen.bench.timing import Call, Timer
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target


@dataclass(frozen=True)
class Workload:
    ours: Call
    peer: Call
    peer_name: str
    max_error: float = 0.0  # our result against the peer's, max |diff| / max |peer|


class Workloads(Protocol):
    def runs(self, target: Target) -> bool:
        """Whether this machine runs `target`'s kernels."""
        ...

    def make(self, loaded: LoadedSpec, target: Target, shape: ProblemShape) -> Workload: ...


ERROR_BAR = 0.02  # ours vs the peer: more than 2% of the peer's largest magnitude is a wrong kernel


class WrongResult(RuntimeError):
    pass


def _row(loaded: LoadedSpec, target: Target, shape: ProblemShape, w: Workload, samples: dict[str, list[float]],
         gpu: str, kernels: dict[str, dict[str, float]], aa: bool = False) -> Row:
    p = paired(samples["ours"], samples["peer"])
    problem = problem_of(loaded.spec)
    peak = peak_tflops(gpu, problem.operand_bits(loaded.spec))
    work = problem.flops(shape, loaded.spec)
    ours_tf = tflops(work, p.ours_us)
    sizes, batch = problem.record_shape(shape)
    return Row(kernel=w.peer_name if aa else loaded.name, target=str(target), shape=sizes, batch=batch,
               kind="aa" if aa else "kernel", peer=w.peer_name,
               spec_file="" if aa else loaded.file, spec_hash="" if aa else loaded.spec_hash,
               variant="" if aa else slot_label(loaded.spec, target, slot_for(loaded.spec, target, shape)),
               ours_us=p.ours_us, peer_us=p.peer_us, ratio=p.ratio, ratio_lo=p.ratio_lo, ratio_hi=p.ratio_hi,
               pairs=p.pairs, ours_tflops=ours_tf, peer_tflops=tflops(work, p.peer_us),
               pct_peak=None if peak is None else 100 * ours_tf / peak, max_error=w.max_error,
               ours_kernels=kernels.get(w.ours.key, {}), peer_kernels=kernels.get(w.peer.key, {}))


def plan(specs: Iterable[LoadedSpec], targets: set[str] | None, shapes: list[ProblemShape] | None,
         workloads: Workloads) -> list[tuple[LoadedSpec, Target, list[ProblemShape]]]:
    """(spec, target, shapes) to time: the spec's targets this machine runs (only `targets` when given)."""
    jobs = []
    for ls in specs:
        for t in ls.spec.targets:
            if (targets and str(t) not in targets) or not workloads.runs(t):
                continue
            wanted = shapes or default_shapes(ls.spec, t)
            jobs.append((ls, t, [s for s in wanted if problem_of(ls.spec).runs_at(ls.spec, s)]))
    return jobs


def run_bench(jobs: list[tuple[LoadedSpec, Target, list[ProblemShape]]], workloads: Workloads, timer: Timer,
              environment: Environment, rounds: int = 40,
              progress: Callable[[str], None] = lambda _: None) -> BenchRecord:
    rows: list[Row] = []
    failures: list[str] = []
    kernels = getattr(timer, "kernels", {})
    aa_done: set[str] = set()
    for ls, target, shapes in jobs:
        for shape in shapes:
            where = f"{ls.name} @ {target} {shape_text(shape)}"
            try:  # one row that cannot be built or is wrong is reported, and the others still run
                w = workloads.make(ls, target, shape)
                if w.max_error > ERROR_BAR:
                    raise WrongResult(f"{where}: result differs from {w.peer_name} by "
                                      f"{w.max_error:.3g} of its largest magnitude (> {ERROR_BAR})")
            except Exception as e:  # noqa: BLE001 (any failure of one workload: say it, go on)
                failures.append(str(e) if isinstance(e, WrongResult) else f"{where}: {type(e).__name__}: {e}")
                progress(f"FAILED {failures[-1]}")
                continue
            if str(target) not in aa_done:  # the table's A/A row, at its first shape
                aa_done.add(str(target))
                aa = Workload(w.peer, Call(w.peer.key, w.peer.fn), w.peer_name)
                rows.append(_row(ls, target, shape, aa, timer.cycle({"ours": aa.ours, "peer": aa.peer}, rounds),
                                 environment.gpu, kernels, aa=True))
                progress(f"A/A {w.peer_name} @ {target} {shape_text(shape)}: {rows[-1].ratio:.4f}")
            rows.append(_row(ls, target, shape, w, timer.cycle({"ours": w.ours, "peer": w.peer}, rounds),
                             environment.gpu, kernels))
            progress(f"{where}: {rows[-1].ratio:.3f}x {w.peer_name}")
    return BenchRecord(environment=environment, rows=rows, failures=failures)
