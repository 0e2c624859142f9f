"""The kernel's spec, rendered once: `specs/<kernel>.py` of the rendered package holds `SPEC` (the spec as
loaded from its file, every backend's the same), and each backend module of that kernel binds it with one
relative import (`from ..specs.<kernel> import SPEC`), so `module.SPEC` reads as it always did.

Only the catalogue (`specgen render`) shares the spec this way: a module rendered on its own
(`render_modules`, a design's `render` called directly: tests and tools) carries `SPEC` inline, as it has
no package to import from. The two forms differ in that binding alone.

Names: kernel names are identifiers without a leading `__` (spec/names.py), so `specs/<kernel>.py` is
never the package's `specs/__init__.py`; no backend folder may be called `specs` (`check_layout`), and no
design may render a module at a spec module's path (the catalogue refuses that render)."""

from __future__ import annotations

from collections.abc import Iterable

from specgen import __version__
from specgen.render.env import oneline, pylit
from specgen.render.writer import GENERATED_MARK, RenderError

SPECS_DIR = "specs"
SPECS_INIT = (f"{GENERATED_MARK} {__version__}; do not edit.\n"
              '"""Each rendered kernel\'s spec (`<kernel>.py`: SPEC), imported by its backends\' modules."""\n')


def spec_module_path(kernel: str) -> str:
    """Where the kernel's shared spec module lies, relative to the rendered package."""
    return f"{SPECS_DIR}/{kernel}.py"


def spec_import(rel: str, kernel: str) -> str:
    """The line a module at `rel` (relative to the rendered package) binds SPEC with: a relative import,
    so that the package works under any name and from any --out folder."""
    dots = "." * (rel.count("/") + 1)
    return f"from {dots}{SPECS_DIR}.{kernel} import SPEC"


def check_layout(backends: Iterable[str]) -> None:
    """Refuse a design line-up whose backend folder would be the spec modules' folder."""
    if SPECS_DIR in backends:
        raise RenderError(f"a design renders into `{SPECS_DIR}/`, the folder of the kernels' shared spec "
                          "modules: rename its backend folder")


def spec_module_text(kernel: str, spec_file: str, spec_hash: str, spec_json: dict[str, object],
                     modules: list[str]) -> str:
    """The text of `specs/<kernel>.py`: the kernel's spec, and which modules read it."""
    listed = "\n".join(f"    {rel}" for rel in sorted(modules))
    return (f'{GENERATED_MARK} {__version__} from {oneline(spec_file)} (kernel "{kernel}", spec {spec_hash}).\n'
            "# Do not edit: change the spec, then run `specgen render`.\n"
            f'"""The spec of kernel {kernel}, as loaded from its file (defaults filled in). Every module rendered\n'
            "for it binds this dict as its `SPEC` with a relative import:\n"
            f'{listed}\n"""\n\n'
            f"SPEC_HASH = {spec_hash!r}\n"
            f"SPEC = {pylit(spec_json)}\n")
