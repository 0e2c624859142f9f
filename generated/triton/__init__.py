"""Rendered triton kernels."""
