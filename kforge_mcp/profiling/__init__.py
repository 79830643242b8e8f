"""Profile capture (torch.profiler, the device platform's profiler, proton), the shared parsers (torch.profiler
traces, proton) and the loader that reads a captured file in any platform's formats into one ProfileReport."""
