"""Apple GPUs (torch's 'mps'): MPS events for the timeline, Instruments' xctrace for depth 'metrics', Apple's peaks."""
