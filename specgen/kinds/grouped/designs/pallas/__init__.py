"""The grouped kind's Pallas TPU (Mosaic, MXU) design."""
