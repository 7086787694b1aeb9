"""The command line, ``aiayn <command>``: one module per group of commands, each parsing and printing only.

Its entrance is :mod:`aiayn.cli.main` (``main``, ``build_parser``); :mod:`aiayn.cli.common` holds what every command
shares; data.py, train.py, translate.py (its input lines: lines.py), evaluate.py, serve.py and interop.py a group each.
"""
