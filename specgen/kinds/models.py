"""The kinds' spec models: `SPEC_MODELS`, one line per kind, and `KernelSpec`, the discriminated union on
`kind` that a spec file's `kernels` list holds (specgen/spec/file.py)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from specgen.kinds.gemm.spec import GemmSpec

SPEC_MODELS = (GemmSpec,)
KernelSpec = Annotated[Union[SPEC_MODELS], Field(discriminator="kind")]  # noqa: UP007 (a union built from a tuple)
