"""The design protocol: one design per (kernel kind, backend, MMA family) owns everything that is not
shared. The core (resolve, check, render, compile, the CLI) asks the registry (specgen/registry.py)
for the design that serves a target and calls the hooks below; it never names a backend.

A design says which targets it serves (`keys`, refined by `serves`), how much on-chip memory its
kernel stages (`memory`, the layout the budget rules check and `auto` stages fill, `stages`), its register
model (`accumulator_registers`, `register_findings`), the TMA boxes its module builds (`tma_boxes`), how a
spec's targets group into generated modules (`modules`), and renders those modules (`render`,
returning `{relative path: text}`). Its ahead-of-time compile lives behind `compile_hook`, a
"module:function" string imported only by `specgen compile`: importing a design must stay free of
any framework or compiler, since check and render import every design.

How to add a design (say a second MMA family on an existing backend):
  1. a row per `backend:arch` in specgen/targets.py, if the target is new;
  2. a package specgen/kinds/<kind>/designs/<name>/ with `design.py` (a `DesignBase` subclass, `DESIGN = ...`),
     `rules.py` (its rules: a `RuleSet` named `RULES`), `names.py` (its modules' identifiers) and its
     compile hook module; its templates under templates/<backend>/ (the torch and jax host parts are
     shared: templates/gemm/torch/, templates/gemm/jax/); its run-time helpers under specgen/runtime/;
  3. one line in its kind's DESIGN_PACKAGES (specgen/kinds/<kind>/__init__.py), before any checked-only
     design it takes targets over from;
  4. its tests: subclasses of its kind's shared bases (specgen/kinds/<kind>/testing/: numerics, guards).

How to add a kernel kind (say grouped GEMM): a package specgen/kinds/<kind>/ with its DESIGN_PACKAGES, its
designs under designs/ and its spec model in spec.py (a LayeredSpec named SPEC_MODEL), one line in
specgen/kinds/lineup.py's KINDS; the rules its designs share in its `rules` part
(they concern its kind only, as its designs' rules do), its problem for bench and tune in `problem`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from specgen import __version__
from specgen.kinds.lineup import part_of
from specgen.memo import IdentityMemo
from specgen.rules.finding import Margin
from specgen.runtime import RUNTIME_ABI  # a constant only: specgen.runtime's package imports nothing
from specgen.targets import Backend, Mma, TargetInfo
from specgen.values import value

if TYPE_CHECKING:
    from specgen.envelope.budget import MemoryBudget
    from specgen.resolved import Resolved, TmaBox
    from specgen.rules.base import Finding
    from specgen.spec.dtypes import DType
    from specgen.spec.load import LoadedSpec
    from specgen.spec.models import Bounds, LayeredSpec, Target

DesignKey = tuple[str, Backend, Mma]  # (kernel kind, backend, MMA family)


@value
class CompileProbe:
    """How `specgen check` settles a near-boundary verdict on a design's target (specgen/settle.py): `hook`
    (the design's compile hook, "module:function") compiles a module rendered for that one config in a
    worker process (specgen/probe.py); `modules` are what it imports (check only looks them up), `libraries`
    the distributions whose versions key the verdicts' disk cache, `extra` the pip extra installing them,
    `environment` what the worker sets before it imports the compiler (the design's `compile_environment`)."""

    hook: str
    modules: tuple[str, ...]
    libraries: tuple[str, ...]
    extra: str
    environment: tuple[tuple[str, str], ...] = ()


_BUDGETS: IdentityMemo[MemoryBudget] = IdentityMemo()  # DesignBase.budget's, by spec object


# What a design's ahead-of-time compile is (its hook, what the hook and the modules import, the libraries a record
# names, the compilers' caches, the pip extra, `auto` stages' cap): a kind whose modules another kind's hook compiles
# takes all of them from that design (`compiles_as`), so the two never drift.
COMPILE_ATTRIBUTES = ("compile_hook", "compiler_modules", "compile_environment", "libraries", "compile_caches", "extra",
                      "max_auto_stages")


def compiles_as(design: type) -> Callable[[type], type]:
    """Class decorator: the decorated design compiles as `design` does (COMPILE_ATTRIBUTES copied)."""
    def take(cls: type) -> type:
        for name in COMPILE_ATTRIBUTES:
            setattr(cls, name, getattr(design, name))
        return cls
    return take


class DesignBase:
    """Defaults for every optional hook; a design overrides what differs."""

    name: ClassVar[str]  # how messages name it
    keys: ClassVar[tuple[DesignKey, ...]]
    renders: ClassVar[bool] = True  # False: checked only (memory and rules, no module)
    compile_hook: ClassVar[str] = ""  # "module:function(module, target) -> CompileResult", imported lazily
    compiler_modules: ClassVar[tuple[str, ...]] = ()  # what the hook and the rendered modules import
    # Environment an ahead-of-time compile needs before the module is imported (set by `tune`'s compile
    # workers, which a test session's environment may have set otherwise).
    compile_environment: ClassVar[dict[str, str]] = {}

    def torch_entry(self, module: object, kernel: str) -> Callable[..., object]:
        """The rendered module's entry that takes torch tensors, as bench times it: done when it returns."""
        return getattr(module, kernel)
    extra: ClassVar[str] = ""  # the pip extra that installs them: `specgen[<extra>]`
    # distributions whose versions a benchmark record and a tune cache name (they change what runs)
    libraries: ClassVar[tuple[str, ...]] = ()
    # environment variables naming the compilers' on-disk caches (`tune --compile-only` points them at a
    # fresh folder, so that no compile is a cache hit)
    compile_caches: ClassVar[tuple[str, ...]] = ()
    # `specgen compile --export`: "module:function(specs, rendered, out, targets) -> [Exported]", imported
    # lazily; "" where the design exports nothing for C++ programs
    export_hook: ClassVar[str] = ""
    renders_variants: ClassVar[bool] = False  # the launcher selects size-selected variants (CFG003 elsewhere)
    # how CFG003's message names the designs that do render them, where not `name` (a design whose
    # modules render variants on some of its targets only: see `renders_variants_on`)
    variants_label: ClassVar[str] = ""
    renders_split_k: ClassVar[bool] = False  # schedule.split_k > 1 is rendered (SPK001 elsewhere)
    renders_gated: ClassVar[bool] = False  # a `gated` epilogue op (B of 2N columns) is rendered (EPI001 elsewhere)
    # how EPI001's message names a design that renders it on some of its targets only (`renders_gated_on`)
    gated_label: ClassVar[str] = ""
    renders_training: ClassVar[bool] = False  # a spec's `training` backward is rendered (TRN001 elsewhere)
    # the backward of a gated epilogue (G of 2N columns: dgate, dup) too, where training is rendered (TRN001 elsewhere)
    renders_gated_training: ClassVar[bool] = False
    # whether a companion (a backward GEMM) runs a kernel of the module's own for its role rather than the forward
    # kernel at the companion's config: check then settles its near verdicts by compiling that kernel (the training
    # spec's module, the role's row of the compile hook: specgen/settle.py), not a forward of the companion's config
    backward_kernels: ClassVar[bool] = False
    # how TRN001's message names a design that renders that backward on some of its targets only
    # (`renders_gated_training_on`)
    gated_training_label: ClassVar[str] = ""
    # the backward of the other chains (scale, residual, clamp, cast, bias along m, any order) and of an fp8
    # forward (rowwise scales) too, where training is rendered (TRN001 elsewhere)
    renders_chain_training: ClassVar[bool] = False
    # of those, an fp8 forward's only (rowwise scales first, then a chain every design renders), where training is
    # rendered (TRN001 elsewhere: `chain_refusal`)
    renders_fp8_training: ClassVar[bool] = False
    # the other chains too, unbatched and not after an fp8 forward's scales, where training is rendered (TRN001
    # elsewhere: `chain_refusal(chains=True)` refuses only those two)
    renders_unbatched_chain_training: ClassVar[bool] = False
    # a batched forward's (`batch = true`) too, not an fp8 one's, where training is rendered (TRN001 elsewhere:
    # `chain_refusal(batch=True)`)
    renders_batched_training: ClassVar[bool] = False
    # a batched fp8 forward's too, where it renders a batched one's and an fp8 one's (TRN001 elsewhere:
    # `chain_refusal(batch=True, batch_fp8=False)`)
    renders_batched_fp8_training: ClassVar[bool] = False
    # how TRN001's message names a design that renders the backward on some of its targets only (see
    # `renders_training_on`); "" where it renders none
    training_label: ClassVar[str] = ""
    # how far the planned on-chip memory may sit from the compiler's, where the plan is not exact (its
    # measured error): a verdict within it is near the boundary, settled by the compiler; None: exact
    smem_margin: ClassVar[Margin | None] = None
    # field paths on which the targets of one module (and a target's variants) must agree (CFG001, CFG002)
    shared_config: ClassVar[tuple[tuple[str, ...], ...]] = ()
    variant_shared_config: ClassVar[tuple[tuple[str, ...], ...]] = ()

    @property
    def kind(self) -> str:
        return self.keys[0][0]

    @property
    def backend(self) -> Backend:
        return self.keys[0][1]

    def serves(self, info: TargetInfo) -> bool:
        """Whether this design is the one for a target (its key matched: kind, backend, MMA family)."""
        return any((b, m) == (info.backend, info.mma) for _, b, m in self.keys)

    # --- resolve ---------------------------------------------------------------------------------------
    def memory(self, spec: LayeredSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        raise NotImplementedError

    def budget(self, spec: LayeredSpec, target: TargetInfo, ab_stages: int) -> MemoryBudget:
        """`memory`, figured once per spec object, target and depth: resolve's `auto` depth, its budget and
        SMEM001's hint ask the same figures of one (immutable) effective spec."""
        key = (id(self), target.name, ab_stages)
        found = _BUDGETS.get(spec, key)
        return found if found is not None else _BUDGETS.put(spec, self.memory(spec, target, ab_stages), key)

    def stages(self, spec: LayeredSpec, target: TargetInfo) -> tuple[int, int]:
        """(pipeline stages, accumulator stages) on `target`, `auto` filled in: the kind's design base reads
        its spec's sections and sizes an `auto` depth from `memory` (specgen/kinds/<kind>/design.py)."""
        raise NotImplementedError(f"the {self.name} design says its pipeline stages")

    def accumulator_registers(self, spec: LayeredSpec, target: TargetInfo) -> tuple[int, int]:
        """(32-bit registers per thread holding a register-resident accumulator, threads sharing it): the
        kind's design base says, from its tile and the design's threads."""
        raise NotImplementedError(f"the {self.name} design says its accumulator's registers")

    def tmem_columns(self, spec: LayeredSpec, target: TargetInfo) -> int:
        """Accumulator TMEM columns per stage (0: the accumulator is not in TMEM)."""
        return 0

    def tma_boxes(self, spec: LayeredSpec, target: TargetInfo) -> tuple[TmaBox, ...]:
        """The boxes the module moves by TMA (TMA001-TMA002 check them): the kind's design base says which
        (specgen/kinds/<kind>/design.py); none by default."""
        return ()

    # --- rules that ask the design ---------------------------------------------------------------------
    def mma_tile(self, spec: LayeredSpec) -> tuple[tuple[int, str], tuple[int, str]]:
        """The tile the MMA computes as ((rows, field), (columns, field)), the fields naming what the spec sets
        for each side: the kind's design base says (the GEMM's output tile, or its transpose where a design
        swaps A and B)."""
        raise NotImplementedError(f"the {self.name} design says which tile its MMA computes")

    def dot_accumulators(self, a: DType) -> tuple[DType, ...] | None:
        """Accumulator dtypes the design's dot takes for `a` operands, where not its MMA family's (DT001)."""
        return None

    def has_register_model(self, target: TargetInfo) -> bool:
        """Whether REG001 runs `register_findings` on the target (a register-resident accumulator)."""
        return False

    def _own_rule(self, name: str) -> Callable[[Resolved], Iterator[Finding]] | None:
        """A function of the design's own rules.py (imported late: rules.py imports design.py)."""
        rules = part_of(type(self).__module__.rpartition(".")[0], "rules")
        return getattr(rules, name, None) if rules is not None else None

    def register_findings(self, ctx: Resolved) -> Iterator[Finding]:
        """REG001 on this design's targets (where `has_register_model`): its rules.py `register_findings`."""
        fn = self._own_rule("register_findings")
        return fn(ctx) if fn is not None else iter(())

    def option_findings(self, ctx: Resolved) -> Iterator[Finding]:
        """OPT001, the backend options this design's target cannot honour: its rules.py `option_findings`."""
        fn = self._own_rule("option_findings")
        return fn(ctx) if fn is not None else iter(())

    def compile_probe(self) -> CompileProbe | None:
        """The compiler that settles this design's near-boundary verdicts: its compile hook over one config
        (None where it renders nothing or has no hook: those verdicts stay the model's)."""
        if not (self.renders and self.compile_hook):
            return None
        return CompileProbe(self.compile_hook, self.compiler_modules, self.libraries or self.compiler_modules, self.extra,
                            tuple(sorted(self.compile_environment.items())))

    def renders_variants_on(self, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders size-selected variants (check's CFG003 refuses them
        where it does not): the design's `renders_variants`, unless it differs by target."""
        return self.renders_variants

    def renders_gated_on(self, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders a gated epilogue (EPI001 refuses it where it does not): the
        design's `renders_gated`, unless it differs by target."""
        return self.renders_gated

    def renders_training_on(self, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders a spec's `training` backward (TRN001 refuses the section
        where it does not): the design's `renders_training`, unless it differs by target."""
        return self.renders_training

    def renders_gated_training_on(self, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders a gated epilogue's backward where it renders `training`
        (TRN001 refuses it where it does not): the design's `renders_gated_training`, unless it differs by target."""
        return self.renders_gated_training

    def renders_fp8_training_on(self, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders an fp8 forward's backward where it renders `training` (TRN001
        refuses it where it does not): the design's `renders_fp8_training`, unless it differs by target."""
        return self.renders_fp8_training

    def training_refusal(self, spec: LayeredSpec, target: TargetInfo | None = None) -> str:
        """Why this design renders no backward for `spec` on `target` where it renders `training` ("" where it does):
        TRN001's message for a section its backward does not cover (dtypes, schedules)."""
        return ""

    def renders_companions_of(self, spec: LayeredSpec, target: TargetInfo) -> bool:
        """Whether the module serving `target` renders `spec`'s companion kernels (a backward's GEMMs): resolve
        resolves them only then (TRN001 says why not). A kind whose backward depends on the spec says so."""
        return self.renders_training_on(target)

    def tune_space(self, spec: LayeredSpec, target: TargetInfo,
                   when: Bounds | None = None) -> dict[str, tuple[object, ...]] | None:
        """The knobs `specgen tune` sweeps on `target` and their ranges (check prunes what cannot fit) for a
        slot bounded by `when` (a variant's bounds, the kind's model; None: the default config); None where
        the design has nothing to tune (`tune` skips the target with a note)."""
        return None

    def config_notes(self, spec: LayeredSpec) -> str:
        """What `check --variants` adds after a config's tile ("" where nothing)."""
        return ""

    # --- render ----------------------------------------------------------------------------------------
    def modules(self, spec: LayeredSpec, targets: list[Target]) -> dict[str, list[Target]]:
        """Relative output path (under the rendered package) -> the targets that module serves."""
        return {}

    def plan(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved]) -> object:
        """One module's plan (`modules` says which targets it serves): every number its template renders,
        from what check resolved for each target (`resolved`, by target name); nothing is resolved again."""
        raise NotImplementedError(f"the {self.name} design is checked only")

    def render(self, loaded: LoadedSpec, targets: list[Target], resolved: dict[str, Resolved],
               shared_spec: bool = False) -> dict[str, str]:
        """{relative path: text} for one module's targets; `resolved` maps each target name to what
        check resolved for it (stages, budget, registers): the design never resolves again. `shared_spec`
        (the catalogue's): the module imports SPEC from the package's `specs/<kernel>.py`
        (render/specs.py's `spec_import`) instead of holding it inline."""
        raise NotImplementedError(f"the {self.name} design is checked only")


@dataclass(frozen=True, kw_only=True)
class ModuleHeader:
    """What every rendered module's plan opens with, whatever its kind and design (`plan_header` fills it):
    the kernel's name, the spec file and hash it came from, the specgen that rendered it, the description."""

    name: str
    spec_file: str
    spec_hash: str
    specgen_version: str
    description: str


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
