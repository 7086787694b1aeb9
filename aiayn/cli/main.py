"""``aiayn <command>``: the parser of every command (each module of cli/ adds its own) and the one entry point.

Errors in the user's input (files, options, configs) print one line naming what is wrong and exit
with status 2; they never show a traceback. Ctrl-C exits with 130 (training saves a checkpoint first).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .. import __version__
from .common import COMMANDS, missing_part, setup_logging
from .data import add_align, add_prepare
from .evaluate import add_calibrate, add_evaluate
from .interop import add_export, add_import
from .manage import add_keys, add_suggestions
from .serve import add_serve
from .train import add_average, add_demo, add_distill, add_plot, add_shortlist, add_train
from .translate import add_translate


def build_parser(only: str | None = "") -> argparse.ArgumentParser:
    """The command line's parser: every command's arguments (the default), or only command ``only``'s (None: none),
    the others by their names and help. A command's arguments can need the module that runs it (its formats, its
    defaults), and importing those costs seconds (PyTorch): ``aiayn translate --engine ctranslate2`` pays for none."""
    parser = argparse.ArgumentParser(prog="aiayn", description="The Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"aiayn {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help in COMMANDS.items():
        if only == "" or only == name:
            ADDERS[name](sub)
        else:
            sub.add_parser(name, help=help, add_help=False)
    return parser


ADDERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "prepare": add_prepare, "align": add_align, "train": add_train, "average": add_average,
    "translate": add_translate, "evaluate": add_evaluate, "calibrate": add_calibrate, "demo": add_demo,
    "serve": add_serve, "keys": add_keys, "suggestions": add_suggestions,
    "export": add_export, "import": add_import, "distill": add_distill, "shortlist": add_shortlist,
    "plot": add_plot,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((x for x in argv if not x.startswith("-")), None)      # (the options before it take no value)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
    setup_logging(args.verbose)
    if args.command not in ("train", "demo"):   # those tune the process with their own `threads` setting
        from ..runtime import keep_freed_memory

        keep_freed_memory()
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("aiayn: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:       # bad input, missing or unreadable files, a full disk, ...
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:                 # an optional part not installed: which extra holds it
        if args.verbose:
            raise
        print(f"aiayn {args.command}: error: {missing_part(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
