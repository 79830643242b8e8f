"""The cuda target: CUDA C++ through load_inline, with a split, cached build."""
