"""What every command shares: its one-line help (COMMANDS), its parser, logging, and the flags made from the
configuration's fields (a flag per DecodeConfig or ServeConfig field: config.setting).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("aiayn")


# Modules of the optional parts whose distribution is named otherwise (the rest are named as their module)
DISTRIBUTIONS = {"translate": "translate-toolkit", "markdown_it": "markdown-it-py", "multipart": "python-multipart",
                 "prometheus_client": "prometheus-client", "charset_normalizer": "charset-normalizer",
                 "python_multipart": "python-multipart"}


def missing_part(e: ImportError) -> str:
    """What to install for a module that is not there: the extra of aiayn's that holds it (pyproject.toml, as the
    installed package's metadata lists it), else the module itself."""
    module = (e.name or str(e).rsplit(" ", 1)[-1].strip("'\"")).split(".")[0]
    dist = DISTRIBUTIONS.get(module, module).lower().replace("_", "-")
    try:
        from importlib.metadata import requires

        listed = requires("aiayn") or []
    except Exception:  # noqa: BLE001 - run from a source tree without its metadata
        listed = []
    import re

    for requirement in listed:
        m = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?[^;]*;\s*extra\s*==\s*['\"]([\w-]+)['\"]", requirement)
        if m and m.group(1).lower().replace("_", "-") == dist and m.group(2) not in ("test", "dev", "bench"):
            return f"this needs {dist}, in aiayn's {m.group(2)} extra: pip install 'aiayn[{m.group(2)}]'"
    return f"this needs the Python module {module}, which is not installed: pip install {dist}"


DEFAULT_CACHE = Path(os.environ.get("AIAYN_CACHE", Path.home() / ".cache" / "aiayn"))


def command(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int],
             description: str | None = None) -> argparse.ArgumentParser:
    """The subcommand ``func`` runs (``cmd_NAME`` is ``aiayn NAME``): its one-line help (:data:`COMMANDS`), and as
    its description the function's docstring (or ``description``)."""
    name = func.__name__.removeprefix("cmd_")
    help = COMMANDS[name]
    p = sub.add_parser(name, help=help, description=description or inspect.cleandoc(func.__doc__ or help))
    p.set_defaults(func=func)
    return p


# each command and its one-line help, in the order `aiayn --help` lists them
COMMANDS = {
    "prepare": "tokenize and binarize a parallel corpus into a data dir",
    "align": "word-align a data dir's training pairs (eflomal) for guided alignment",
    "train": "train a model on a data dir (re-run to resume)",
    "average": "average the last N checkpoints of a run (paper §6.1)",
    "translate": "translate text (stdin -> stdout by default)",
    "evaluate": "translate a test set and score it with sacreBLEU (BLEU, chrF, TER)",
    "calibrate": "fit a run's confidence (per sentence, in [0, 1]) on its validation split against sentence chrF",
    "demo": "prepare + train + evaluate + translate on the bundled Multi30k",
    "serve": "an HTTP translation service with a web page (needs aiayn[serve])",
    "keys": "add, list or remove the API keys of aiayn serve --api-keys DB",
    "suggestions": "export the corrections sent to aiayn serve --suggestions DB as a parallel corpus",
    "export": "export a run to CTranslate2, Hugging Face transformers or an Argos package (optionally checked)",
    "import": "read a pretrained Marian / OPUS-MT model into a run dir",
    "distill": "translate a corpus with a teacher into a data dir for a student (Kim & Rush 2016)",
    "shortlist": "build a run's lexical shortlist (fewer output tokens per batch: faster decoding)",
    "plot": "plots: positional encoding, learning rate, label smoothing, a run's training curves "
             "and attention maps (needs matplotlib)",
}


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", stream=sys.stderr)


def add_setting_flags(p: argparse.ArgumentParser, cls: type, section: str, exclude: tuple[str, ...] = (),
                       default: Callable[[dataclasses.Field[Any]], str] = lambda f: f"{f.default}",
                       hints: dict[str, Any] | None = None) -> None:
    """One flag per field of a settings dataclass made with config.setting (``max_len_a`` -> ``--max-len-a``, or the
    field's own ``flag``), typed (or read by its ``parse``), with its help and ``default(field)`` as the default it
    names; parsed into ``section.NAME``, None when not given (:func:`given`). A field not made with config.setting
    is not a flag."""
    import types
    import typing

    hints = hints or typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in exclude or "help" not in f.metadata:
            continue
        hint, flag = hints[f.name], f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        if typing.get_origin(hint) in (typing.Union, types.UnionType):           # str | None: a str
            hint = next(t for t in typing.get_args(hint) if t is not type(None))
        kw: dict[str, Any] = {"dest": f"{section}.{f.name}", "default": None,
                              "help": f"{f.metadata['help']} (default: {default(f)})".replace("%", "%%")}
        if f.metadata.get("parse"):
            p.add_argument(flag, type=_parsed(f.metadata["parse"]), metavar=f.name.upper(), **kw)
        elif hint is bool:
            p.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif typing.get_origin(hint) is typing.Literal:
            p.add_argument(flag, choices=typing.get_args(hint), **kw)
        else:
            p.add_argument(flag, type=hint, metavar=f.name.upper(), **kw)


def _parsed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A field's ``parse`` as an argparse type: its ValueError the flag's error."""
    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parsed


def add_request_flags(p: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """One flag per option of a request (pipeline.Request's fields made with config.setting: ``--sentences``,
    ``--repair``, ``--format``, ...), parsed into ``request.NAME`` (:func:`given`)."""
    from ..translation.pipeline import Request, option_hints

    add_setting_flags(p, Request, "request", exclude, hints=option_hints())


def given(a: argparse.Namespace, section: str) -> dict[str, Any]:
    """The settings of ``section`` given on the command line (:func:`add_setting_flags`), by field name."""
    return {k.split(".", 1)[1]: v for k, v in vars(a).items() if k.startswith(section + ".") and v is not None}


def add_decode_flags(p: argparse.ArgumentParser, exclude: tuple[str, ...] = (), several: str = "chain") -> None:
    """--model (``several``: repeatable), and one flag per DecodeConfig field; a field not given keeps the run's saved
    setting."""
    from ..config import DecodeConfig

    p.add_argument("--engine", default="auto",
                   help="a name in engines/auto.py's table: torch: aiayn's own; ctranslate2: the model converted for "
                        "CTranslate2 on first use, cached in the run dir (needs aiayn[export]); auto: CTranslate2 where "
                        "it is installed, aiayn's own for what it cannot do (constraints, attention maps), said when "
                        "used (default: %(default)s)")
    if several == "pairs":
        p.add_argument("--model", required=True, type=Path, action="append",
                       help="a run dir (or a checkpoint dir inside one, or a directory of run dirs); repeat it to "
                            "serve several models, one per language pair (pairs without one go through a pivot)")
    else:
        p.add_argument("--model", required=True, type=Path, action="append",
                       help="a run dir (or a checkpoint dir inside one); repeat it to translate through each in turn "
                            "(de-en then en-fr: a pivot)")
    add_setting_flags(p, DecodeConfig, "decode", exclude,
                       default=lambda f: f"the run's decode.{f.name}; new runs: {f.default}")


def unit(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a number in [0, 1]") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a number in [0, 1]")
    return x


def add_processes_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processes", action=argparse.BooleanOptionalAction, default=True,
                   help="aiayn's engine on a CPU with more than one worker (--workers; auto: one per core): each worker "
                        "a process with its own copy of the model and its share of the cores, started at once, so "
                        "that they load while this one reads the input, and no two batches share Python's GIL "
                        "(docs/performance.md); --no-processes: threads of this process. The output is the same")


def number(x: float | None) -> str:
    """A measure as printed (None: it cannot be measured there, one class missing)."""
    return "n/a" if x is None else f"{x:.3f}"
