"""Serving: the trained model behind HTTP (``aiayn serve``).

Its entrance is :mod:`aiayn.serving.serve` (``serve``, ``ServeConfig``), given the models to serve
(:class:`aiayn.serving.models.Models`). Inside: the app (serve.py), aiayn's own API and LibreTranslate's (api.py),
what every request passes at the door (middleware.py: the wrappers, the rules, keys and limits), the loaded models per
language pair and the metrics (models.py), the memo and the batchers that join requests into searches (batcher.py),
documents (files.py) and the web page (static/); the engines that decode are :mod:`aiayn.engines`. A request's
translation itself is not here: it is :mod:`aiayn.translation.pipeline`, the same for the command line and both APIs.
"""
