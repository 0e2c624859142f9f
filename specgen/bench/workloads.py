"""What `specgen bench` and the tuner run on the GPU: our rendered module's call, and the workload of one
(spec, target, shape): the inputs and the peer a user would run instead come from the spec's kind (its
problem module: specgen/bench/problem.py). Imports torch inside the functions."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specgen.bench.problem import ProblemShape, problem_of
from specgen.bench.tensors import max_error
from specgen.registry import design_for
from specgen.spec.load import LoadedSpec, load_file
from specgen.spec.models import LayeredSpec, Target


def catalogue_kernel(name: str, specs: Path) -> LoadedSpec:
    """The kernel called `name` among the spec files of the folder `specs` (the gpu/ scripts' catalogue):
    exactly one, else a ValueError that says how many."""
    found = [s for f in sorted(specs.glob("*.toml")) for s in load_file(f) if s.name == name]
    if len(found) != 1:
        raise ValueError(f"{name}: {len(found)} kernels of that name in {specs} (one expected)")
    return found[0]


def ours_call(module: ModuleType, spec: LayeredSpec, target: Target, args: tuple[Any, ...]) -> Callable[[], Any]:
    """Our rendered module's call on `args`: the design's torch entry (done when it returns)."""
    name = module.METADATA["kernel"] if hasattr(module, "METADATA") and "kernel" in module.METADATA else spec.name
    fn = design_for(spec.kind, target).torch_entry(module, name)
    return lambda: fn(*args)


def build_module(loaded: LoadedSpec, target: Target, folder: Path | None = None,
                 module_name: str | None = None) -> ModuleType:
    """Render one spec's module for `target` and import it (rendered as `specgen render` renders it: every
    file it writes, e.g. a Pallas target's package `__init__.py` beside the module)."""
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_modules
    from specgen.render.writer import atomic_write

    folder = folder or Path(tempfile.mkdtemp(prefix="specgen-bench-"))
    texts = render_modules(loaded, [target])
    for rel, text in texts.items():
        # atomically: `tune --ray` timing actors share the folder, and one may import a module another is
        # writing (or one killed mid-write left); a partial file would fail every job on that module
        atomic_write(folder / rel, text.encode())
    (module,) = [rel for rel in texts if not rel.endswith("__init__.py")]
    return load_rendered(folder / module,
                         module_name or f"_specgen_bench_{loaded.name}_{loaded.spec_hash}_{target.backend.value}")


class GpuWorkloads:
    """run.Workloads on this machine's CUDA device: the targets of its compute capability (Mosaic TPU
    targets need a TPU), each spec's module rendered once."""

    def __init__(self, folder: Path | None = None) -> None:
        import torch

        major, minor = torch.cuda.get_device_capability()
        self.cc = 10 * major + minor
        self.folder = folder or Path(tempfile.mkdtemp(prefix="specgen-bench-"))
        self.modules: dict[tuple[str, str], ModuleType] = {}

    def runs(self, target: Target) -> bool:
        from specgen.targets import target_info

        info = target_info(target)
        return info.memory == "smem" and info.compute_capability == self.cc

    def make(self, loaded: LoadedSpec, target: Target, shape: ProblemShape) -> Any:
        from specgen.bench.run import Workload
        from specgen.bench.timing import Call

        key = (loaded.spec_hash, str(target))
        if key not in self.modules:
            self.modules[key] = build_module(loaded, target, self.folder)
        problem = problem_of(loaded.spec)
        args = problem.inputs(loaded.spec, shape)
        ours = ours_call(self.modules[key], loaded.spec, target, args)
        peer = problem.peer_call(loaded.spec, target, args)
        name = problem.peer_name(loaded.spec, target)
        return Workload(Call(f"{loaded.name}@{target}", ours), Call(name, peer), name, max_error(ours(), peer()))
