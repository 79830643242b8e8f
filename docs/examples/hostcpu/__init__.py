"""docs/adding-a-target.md's example platform: the host CPU as a vendor of its own."""
