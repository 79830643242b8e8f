"""Evaluation engine: worker processes, correctness, timing, jobs. Candidate code runs only in workers."""
