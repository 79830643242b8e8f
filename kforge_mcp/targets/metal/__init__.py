"""The metal target: Metal shaders through torch.mps.compile_shader (macOS)."""
