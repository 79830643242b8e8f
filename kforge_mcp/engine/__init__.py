"""The Engine's verbs, one module each (compile, verify, batch, profile, roofline, analyze), over the parts
they share (parts.py). ``kforge_mcp.api.Engine`` is their facade for the library, the tools and the CLI."""
