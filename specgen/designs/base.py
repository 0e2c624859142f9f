"""The design protocol: one design per (kernel kind, backend) owns everything backend-specific.

A design says how much on-chip memory its kernel stages (`memory`, the layout the budget rules check
and `auto` stages fill), how a spec's targets group into generated modules (`modules`), and renders
those modules (`render`, returning `{relative path: text}` so that a backend may emit several files).
Its ahead-of-time compile lives behind `compile_hook`, a "module:function" string imported only by
`specgen compile`: importing a design must stay free of torch, triton, jax and cutlass, since check
and render import every design.

How to add a backend (say CuTe sm90):
  1. a row per `backend:arch` in specgen/targets.py (device, MMA family, TMA boxes, clusters, memory);
  2. specgen/designs/gemm_<backend>.py: a class with the attributes below; register it in
     specgen/designs/__init__.py's DESIGNS under ("gemm", Backend.<backend>);
  3. its templates under templates/<backend>/, including templates/torch/ for the torch host part;
  4. its run-time helpers under specgen/runtime/ (imported by generated code only);
  5. its compile hook module (imports the backend's compiler lazily);
  6. tests under tests/backends/<backend>/ subclassing the shared numerics and guard bases.
  Its rules still go in the shared specgen/envelope/rules.py (keyed by the target's row), and the
  registry holds one design per (kind, backend): a second design on one backend edits both.

How to add a kernel kind (say grouped GEMM):
  1. its spec model in specgen/spec/ (a new member of the `kind` union);
  2. rules that concern it carry the kind in `@rule(..., kinds=(...))` (rules never run on kinds
     they do not name);
  3. one design per backend that renders it, registered under (kind, backend);
  4. a float64 reference for it in tests/reference.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from specgen import __version__
from specgen.runtime import RUNTIME_ABI  # a constant only: specgen.runtime's package imports nothing
from specgen.targets import Backend, TargetInfo

if TYPE_CHECKING:
    from specgen.envelope.budget import MemoryBudget
    from specgen.resolved import Resolved
    from specgen.spec.load import LoadedSpec
    from specgen.spec.models import GemmSpec, Target


class Design(Protocol):
    kind: str  # the spec kind it renders ("gemm")
    backend: Backend
    compile_hook: str  # "module:function(module_path, target) -> CompileResult", imported lazily

    def memory(self, spec: GemmSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        """The on-chip bytes one block of this design stages at `ab_stages`, broken down (the target's
        row of the table, not the bare Target: its device, MMA family and memory kind)."""
        ...

    def modules(self, spec: GemmSpec, targets: list[Target]) -> dict[str, list[Target]]:
        """Relative output path (under the rendered package) -> the targets that module serves."""
        ...

    # Optional: `shared_config`, field paths (("tile",), ("triton", "tma")) on which the targets of one
    # module must agree after their per_target tables apply (check's CFG001 says where they do not).
    # Optional: `renders_variants = True` where the module selects size-selected variants at launch; a
    # design without it refuses variants on the targets it renders (check's CFG003).
    # Optional: `renders_split_k = True` where the kernel splits K (schedule.split_k) and reduces the
    # partials; check's SPK001 refuses split-K on the backends of designs without it.
    # Optional: `tma_boxes(spec, target) -> tuple[resolve.TmaBox, ...]`, the boxes the module's TMA
    # descriptors use, so that the TMA rules check exactly those (resolve.py falls back to one box per
    # tile where the target's row says tiles move as raw TMA boxes).

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> dict[str, str]:
        """{relative path: text} for one module's targets; `resolved` maps each target name to what
        check resolved for it (stages, budget, registers): the design never resolves again."""
        ...


def plan_header(loaded: LoadedSpec) -> dict[str, str]:
    """The fields every design's plan opens with, for the module's header and METADATA: the kernel's name,
    the spec file and hash it came from, the specgen that rendered it, the spec's description."""
    spec = loaded.spec
    return {"name": spec.name, "spec_file": loaded.file, "spec_hash": loaded.spec_hash,
            "specgen_version": __version__, "description": spec.description}


def module_identity(name: str, spec_file: str, spec_hash: str, specgen_version: str,
                    targets: list[str]) -> dict[str, object]:
    """The keys a torch-hosted module's METADATA starts with: the runtime ABI it was rendered for, the spec it
    came from, and its custom op, namespaced by spec hash (runtime/torch/ops.py) so that two rendered
    packages with one kernel name never alias."""
    return {"runtime_abi": RUNTIME_ABI, "specgen_version": specgen_version, "spec_file": spec_file,
            "spec_hash": spec_hash, "kernel": name, "custom_op": f"specgen::{name}_{spec_hash}", "targets": targets}
