"""How an error message quotes what it refuses: a little of it, and how long it was. The one rule for the core
(constraints.py, the engines) and the server (serving/middleware.py), so that a refusal never echoes a whole text."""

from __future__ import annotations

from typing import Any

QUOTE = 40          # characters of a refused value an error message quotes


def cut(text: str, most: int = QUOTE) -> str:
    """``text`` for an error message: at most ``most`` characters of it, and how long it was if longer."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def brief(value: Any, most: int = QUOTE) -> str:
    """``value`` quoted for an error message: the repr of at most ``most`` characters of it (:func:`cut`)."""
    text = value if isinstance(value, str) else str(value)
    return repr(text[:most]) + cut(text, most)[len(text[:most]):]
