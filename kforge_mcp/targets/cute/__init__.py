"""The cute target: the CuTe DSL (and CuTe C++ headers through the cuda build)."""
