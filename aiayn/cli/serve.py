"""``aiayn serve``: the HTTP service's flags (ServeConfig's fields) and its models.
"""

from __future__ import annotations

import argparse
import os

from .. import __version__
from .common import add_decode_flags, add_setting_flags, command, given


def cmd_serve(a: argparse.Namespace) -> int:
    """JSON API (POST /translate, /attention; GET /health, /info, /metrics), LibreTranslate's API (POST /translate
    with q, /detect; GET /languages, /frontend/settings) and a web page at /. With several --model, each request is
    routed by its source and target languages. The lines of concurrent requests are decoded together, joining the
    running batch between decoding steps. SIGTERM or Ctrl-C: requests in flight are answered, then it exits."""
    from ..runtime import cpu_workers
    from ..serving.models import Models, Served
    from ..serving.serve import ServeConfig, serve

    settings = given(a, "serve")
    key = settings.pop("api_key", None) or os.environ.get("AIAYN_API_KEY") or None
    cfg = ServeConfig(**settings, api_key=key)
    # the server's decoding threads are its parallelism (--workers): each decodes on its own thread (aiayn's engine);
    # CTranslate2 decodes that many batches side by side
    workers = cfg.workers if a.engine != "torch" else 1
    # aiayn's engine on a CPU: in worker processes, so that this process needs no PyTorch (auto: when it is needed)
    processes = cpu_workers(cfg.workers) if a.engine in ("torch", "auto") and cfg.processes else 0
    models = Models.load(a.model, a.engine, cfg.memory_budget > 0, processes, **given(a, "decode"), workers=workers)
    if cfg.fallback:
        models.add_fallback(Served.load(cfg.fallback, a.engine, True, processes, workers=workers), cfg.min_confidence)
    serve(models, cfg, {"version": __version__})
    return 0


def add_serve(sub: argparse._SubParsersAction) -> None:
    from ..serving.serve import ServeConfig

    p = command(sub, cmd_serve)
    # the server's own --workers and --max-batch-tokens decide what decode.workers and decode.batch_tokens do elsewhere
    add_decode_flags(p, exclude=("workers", "batch_tokens"), several="pairs")
    add_setting_flags(p, ServeConfig, "serve",
                       default=lambda f: "$AIAYN_API_KEY if set" if f.name == "api_key" else f"{f.default}")
