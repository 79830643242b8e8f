"""NVIDIA GPUs: Nsight Compute capture and parsers, NVIDIA's peaks, shared-memory limits, the CUDA runtime's state."""
