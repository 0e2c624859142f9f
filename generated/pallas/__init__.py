"""Rendered pallas kernels."""
