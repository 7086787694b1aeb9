"""Engines: what decodes, each behind one interface (:class:`aiayn.engines.base.Engine`).

The entrance is :mod:`aiayn.engines.auto` (``load``: the ``{name: loader}`` table behind ``--engine``). One module per
engine: :mod:`aiayn.engines.torch` (aiayn's own, in this process), :mod:`aiayn.engines.ctranslate2` (the model on
CTranslate2, without PyTorch) and :mod:`aiayn.engines.processes` (aiayn's own in worker processes); the protocol, the
base class and the decoding plan every engine follows are :mod:`aiayn.engines.base`. An engine imports neither the
pipeline (:mod:`aiayn.translation.pipeline`, which calls it) nor anything of serving/.
"""
