"""normgen from Python: `normgen.torch` loads the PyTorch operators of a kernel library."""
