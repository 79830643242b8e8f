"""One Device per torch device kind, and the driver probe that finds them without importing torch."""
