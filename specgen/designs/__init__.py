"""Kernel designs: one module per (kernel kind, backend[, arch]) that owns its memory layout, how a
spec's targets group into modules, its plan and its rendering (see ../shared/DESIGN.md)."""
