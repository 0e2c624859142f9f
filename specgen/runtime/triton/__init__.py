"""Run-time helpers of the Triton designs' modules: the direct launcher and host TMA descriptors."""
