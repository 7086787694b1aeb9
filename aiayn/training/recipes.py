"""Recipes and the precedence that resolves a run's configuration: a preset, then a YAML recipe (aiayn/configs/, or any
file), then ``--set section.key=value`` (a key of two sections, such as ``precision``, written with its section); the
result is one validated config.RunConfig.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from ..config import PRESETS, SECTIONS, RunConfig


def _owner(key: str) -> tuple[str, str]:
    """Which section a (possibly dotted) key belongs to."""
    if "." in key:
        section, name = key.split(".", 1)
        if section not in SECTIONS:
            raise ValueError(f"unknown config section {section!r} in {key!r}; expected one of {', '.join(SECTIONS)}")
        return section, name
    owners = [s for s, c in SECTIONS.items() if key in {f.name for f in fields(c)}]
    if len(owners) > 1:
        qualified = " or ".join(f"{s}.{key}" for s in owners)
        raise ValueError(f"{key!r} is a setting of {' and of '.join(owners)}: write {qualified}")
    if not owners:
        valid = {s: sorted(f.name for f in fields(c)) for s, c in SECTIONS.items()}
        listing = "; ".join(f"{s}: {', '.join(v)}" for s, v in valid.items())
        raise ValueError(f"unknown config key {key!r}. Valid keys — {listing}")
    return owners[0], key


def parse_sets(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["d_model=256", "train.warmup=800"]`` -> ``{"model": {"d_model": 256}, "train": {"warmup": 800}}``.

    Values are parsed as YAML scalars: ``0.1`` is a float, ``true`` a bool, ``post`` a string.
    """
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set {item!r}: expected key=value")
        section, name = _owner(key.strip())
        try:
            out[section][name] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:          # not a YAML scalar (control characters, a lone quote, ...): the text itself
            out[section][name] = raw
    return out


RECIPES = Path(__file__).parents[1] / "configs"


def recipe_path(name: str | Path) -> Path:
    """A YAML file, or the name of a shipped recipe (``multi30k-de-en`` -> aiayn/configs/multi30k-de-en.yaml)."""
    p = Path(name)
    if not p.exists() and p.suffix == "" and (RECIPES / f"{p.name}.yaml").is_file():
        return RECIPES / f"{p.name}.yaml"
    return p


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = recipe_path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError:
        shipped = ", ".join(sorted(r.stem for r in RECIPES.glob("*.yaml")))
        raise ValueError(f"config file not found: {p} (shipped recipes: {shipped})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a mapping with sections {', '.join(SECTIONS)} (and optionally 'preset')")
    return data


def resolve(
    preset: str | None = None,
    yaml_path: str | Path | None = None,
    sets: list[str] | None = None,
    base: RunConfig | None = None,
) -> RunConfig:
    """Apply the precedence chain: ``base`` (or defaults) -> preset -> YAML -> ``--set``.

    A YAML file may name its own ``preset:``; an explicit ``preset`` argument wins over it.
    """
    layers: list[dict[str, dict[str, Any]]] = []
    doc = load_yaml(yaml_path) if yaml_path else {}
    preset = preset or doc.pop("preset", None)
    doc.pop("preset", None)
    if preset:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}: expected one of {', '.join(PRESETS)}")
        layers.append({"model": dict(PRESETS[preset])})
    unknown = set(doc) - set(SECTIONS)
    if unknown:
        raise ValueError(f"{yaml_path}: unknown section(s) {sorted(unknown)}; expected {', '.join(SECTIONS)} or preset")
    for section, values in doc.items():
        if not isinstance(values, dict):
            raise ValueError(f"{yaml_path}: section {section!r} must be a mapping, got {values!r}")
    layers.append(doc)
    layers.append(parse_sets(sets or []))
    merged = (base or RunConfig()).to_dict()
    for layer in layers:
        for section, values in layer.items():
            merged[section].update(values)
    return RunConfig.from_dict(merged)
