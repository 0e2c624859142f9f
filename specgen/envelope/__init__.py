"""Hardware envelopes: device limits as data, the shared SMEM/TMEM/VMEM budget, and the named rules."""
