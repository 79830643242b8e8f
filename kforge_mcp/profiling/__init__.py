"""Profile capture (torch.profiler, ncu, proton) and the parsers of every profile format into one ProfileReport."""
