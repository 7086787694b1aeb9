"""The documentation site: ``make docs`` builds it into build/docs (Sphinx; tests/project/test_docs.py builds it strictly and
opens the walkthrough in a browser).

Why Sphinx (over MkDocs): the docstrings are already written in its roles (``:class:``, ``:func:``), so autodoc
renders the Python API from them as they are; myst-nb executes the walkthrough's jupytext scripts as notebooks; and
MathJax comes bundled in a Python package (sphinx-mathjax-offline), so formulas render with no network at build or
read time. ``-W`` makes every warning (a broken link, a missing reference, a failed cell) an error."""

from __future__ import annotations

import os
from pathlib import Path

project = "aiayn"
author = "the aiayn authors"
copyright = "2026, the aiayn authors"
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx-mathjax-offline"]
html_theme = "furo"
html_title = "aiayn: Attention Is All You Need, as real software"
language = "en"
exclude_patterns = ["_build", "walkthrough/walkthrough-figures", "**/.ipynb_checkpoints"]
suppress_warnings = ["myst.header"]

# Markdown (MyST): GitHub's tables, $...$ math for the walkthrough, anchors for every heading down to ###
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# The walkthrough: jupytext percent scripts executed on every build in their fast mode (the same cells; fewer training
# steps: AIAYN_WALKTHROUGH_FAST=1); `make walkthrough` renders the full mode.
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
os.environ.setdefault("AIAYN_WALKTHROUGH_FAST", "1")
os.environ.setdefault("AIAYN_WALKTHROUGH_FIGURES", str(Path(__file__).parent.parent / "build" / "docs-figures"))

# Only the walkthrough's scripts are notebooks; conf.py is not a page
source_suffix = {".md": "myst-nb", ".py": "myst-nb"}
include_patterns = ["*.md", "walkthrough/*.py"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}


def _lang(app, pagename, templatename, context, doctree):  # type: ignore[no-untyped-def]
    """The Chinese pages (``*.zh``) say so: <html lang="zh-Hans">."""
    if pagename.endswith(".zh"):
        context["language"] = "zh-Hans"
        context["lang_attr"] = "zh-Hans"


def setup(app):  # type: ignore[no-untyped-def]
    app.connect("html-page-context", _lang)
