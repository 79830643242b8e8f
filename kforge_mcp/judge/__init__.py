"""Judging a candidate: correctness, precision, guards against cheats, timing and baselines."""
