"""The Pallas TPU kernels' VMEM layout numbers, shared by the dense design's memory model (design.py, which the
grouped TPU design imports them from) and its backward's plan (training.py: the blocks VMEM001's companions do not
count, PAL014). Imports nothing."""

TPU_ARGS_DOUBLE_BUFFERED = 2  # every BlockSpec'd operand is double-buffered by the pipeline emitter
TPU_LANES = 128  # VMEM tiles are (sublanes, 128 lanes) of 32-bit words: jax `_src/tpu_info.py`
TPU_TILE_ROW_BYTES = 32  # bytes of one lane across a tile's sublanes (8 x 4 B; packed types keep 32 B)
