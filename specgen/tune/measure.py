"""Timing a candidate: one paired cycle of the candidate, the incumbent and the peer at one shape (the
project's timer), giving candidate vs incumbent and candidate vs peer per round. `Measurer` is what
run.py calls: `local(...)` on this process's GPU, `ray_actors(...)` through one Ray actor per GPU;
the tests pass a fake timer and fake calls."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from specgen.bench.shapes import Shape
from specgen.bench.stats import paired
from specgen.bench.timing import Call, Timer
from specgen.spec.models import parse_target

Measurer = Callable[[dict, dict, str, Shape, int], dict[str, float]]


class Calls(Protocol):
    def __call__(self, cand: dict, inc: dict, target: str, shape: Shape) -> tuple[Call, Call, Call]:
        """Candidate, incumbent and peer calls on one set of inputs."""
        ...


def measure(calls: Calls, timer: Timer, cand: dict, inc: dict, target: str, shape: Shape,
            rounds: int) -> dict[str, float]:
    c, i, p = calls(cand, inc, target, shape)
    samples = timer.cycle({"cand": c, "inc": i, "peer": p}, rounds)
    vs_inc = paired(samples["cand"], samples["inc"])
    vs_peer = paired(samples["cand"], samples["peer"])
    return {"ours_us": vs_inc.ours_us, "incumbent_us": vs_inc.peer_us, "peer_us": vs_peer.peer_us,
            "ratio": vs_inc.ratio, "ratio_lo": vs_inc.ratio_lo, "ratio_hi": vs_inc.ratio_hi,
            "ratio_peer": vs_peer.ratio, "pairs": vs_inc.pairs}


class GpuCalls:
    """Calls on this machine's GPU: each flattened spec's module rendered once (its compile was done ahead
    of time: the JIT finds it in the disk cache), inputs per (spec semantics, shape) made once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.modules: dict[str, ModuleType] = {}
        self.inputs: dict[tuple, tuple[Any, ...]] = {}

    def _module(self, flat: dict, target: str) -> Any:
        from specgen.bench.workloads import build_module
        from specgen.tune.space import loaded_from

        loaded = loaded_from(flat)
        if loaded.spec_hash not in self.modules:
            self.modules[loaded.spec_hash] = build_module(loaded, parse_target(target), self.folder / loaded.spec_hash)
        return loaded, self.modules[loaded.spec_hash]

    def __call__(self, cand: dict, inc: dict, target: str, shape: Shape) -> tuple[Call, Call, Call]:
        from specgen.bench.workloads import inputs, ours_call, peer_call, peer_name

        t = parse_target(target)
        (lc, mc), (li, mi) = self._module(cand, target), self._module(inc, target)
        key = (li.spec_hash, shape)
        if key not in self.inputs:
            self.inputs.clear()  # one shape's tensors at a time: 8192^3 operands are 256 MB
            self.inputs[key] = inputs(li.spec, shape)
        args = self.inputs[key]
        return (Call(f"cand {lc.spec_hash}", ours_call(mc, lc.spec, t, args)),
                Call(f"inc {li.spec_hash}", ours_call(mi, li.spec, t, args)),
                Call(peer_name(li.spec, t), peer_call(li.spec, t, args)))


def local(calls: Calls, timer: Timer) -> Measurer:
    return lambda cand, inc, target, shape, rounds: measure(calls, timer, cand, inc, target, shape, rounds)


class TimingActor:
    """One per GPU under Ray (`num_gpus=1`): the GPU calls and the CUPTI timer in the actor's process."""

    def __init__(self, folder: str) -> None:
        from specgen.bench.timing import CuptiTimer

        self.calls, self.timer = GpuCalls(Path(folder)), CuptiTimer()

    def measure(self, cand: dict, inc: dict, target: str, shape: tuple, rounds: int) -> dict[str, float]:
        return measure(self.calls, self.timer, cand, inc, target, Shape(*shape), rounds)


def ray_actors(folder: Path) -> Measurer:
    """One TimingActor per GPU of the Ray cluster; jobs go round-robin (each call waits for its result,
    so the tuner's order, budget and cache stay as without Ray)."""
    import ray

    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise RuntimeError("--ray: the Ray cluster has no GPU to time on (ray.cluster_resources() lists none)")
    actor = ray.remote(num_gpus=1)(TimingActor)
    actors = itertools.cycle([actor.remote(str(folder)) for _ in range(gpus)])
    return lambda cand, inc, target, shape, rounds: ray.get(next(actors).measure.remote(cand, inc, target,
                                                                                         tuple(shape), rounds))


def one_cycle(calls: Calls, timer: Timer, flats: dict[str, dict], inc: dict, target: str, shape: Shape,
              rounds: int) -> dict[str, float]:
    """Every given candidate in one rotation (name -> median us): `specgen tune --verify`'s check that the
    pick is the fastest when all are timed side by side."""
    import statistics

    cycle = {name: calls(flat, inc, target, shape)[0] for name, flat in flats.items()}
    return {name: statistics.median(v) for name, v in timer.cycle(cycle, rounds).items()}
