"""The CPU: torch.profiler's timeline and placeholder peaks."""
