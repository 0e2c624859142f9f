"""The spec model: what a kernel is (dtypes, epilogue ops, the kernel spec) and how spec files load."""
