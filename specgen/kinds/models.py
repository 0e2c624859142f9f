"""The kinds' spec models: `SPEC_MODELS`, each kind's `spec` part's `SPEC_MODEL` in line-up order (a kind is
one line in specgen/kinds/lineup.py's KINDS, nothing here), and `KernelSpec`, the discriminated union on
`kind` that a spec file's `kernels` list holds (specgen/spec/file.py)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from specgen.kinds.lineup import parts

SPEC_MODELS = tuple(m.SPEC_MODEL for _, m in parts("spec", of="kinds"))
KernelSpec = Annotated[Union[SPEC_MODELS], Field(discriminator="kind")]  # noqa: UP007 (a union built from a tuple)
