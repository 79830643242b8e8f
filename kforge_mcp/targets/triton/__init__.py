"""The triton target: Triton on NVIDIA, Intel XPU, or the CPU interpreter."""
