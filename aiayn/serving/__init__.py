"""Serving: the trained model behind HTTP (``aiayn serve``).

Its entrance is :mod:`aiayn.serving.serve` (``serve``, ``ServeConfig``), given the models to serve
(:class:`aiayn.serving.models.Models`). Inside: aiayn's own API (serve.py), LibreTranslate's API (libretranslate.py),
the loaded models per language pair (models.py), the batchers that join requests into searches (batcher.py) and the
web page (static/); the engines that decode are :mod:`aiayn.engines`. A request's translation itself is not
here: it is :mod:`aiayn.translation.pipeline`, the same for the command line and both APIs.
"""
