"""The command line: each command's arguments and options declared once (options.py), typer's
commands built from them (cli.py), the console entry point's fast path that parses with them
(entry.py), and one module per command.
"""
