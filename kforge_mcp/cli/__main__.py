from kforge_mcp.cli.main import main

main()
