"""The grouped kind's Pallas Mosaic GPU (wgmma, pallas:gpu_sm90) design."""
