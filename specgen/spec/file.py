"""A spec file: `kernels`, a list of kernel specs of any registered kind (specgen/kinds/models.py)."""

from __future__ import annotations

from pydantic import Field

from specgen.kinds.models import KernelSpec
from specgen.spec.models import Strict


class SpecFile(Strict):
    kernels: list[KernelSpec] = Field(min_length=1)
