"""The command line: typer's commands (cli.py), the console entry point's fast paths (entry.py),
each command's options declared once (options.py) and one module per command.
"""
