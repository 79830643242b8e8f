"""The numpy target: kernels written as NumPy functions, run on the CPU (docs/adding-a-target.md)."""
