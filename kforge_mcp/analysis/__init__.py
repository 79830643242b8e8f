"""Profile analysis: parsers, roofline and the performance-analysis agent (see the profiling issue)."""
