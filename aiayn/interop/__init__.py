"""Interop: aiayn's models in and out of other engines and formats.

One module per job: :mod:`aiayn.interop.export` (``aiayn export``: CTranslate2 and Hugging Face),
:mod:`aiayn.engines.auto` (``--engine``: which engine decodes, ``auto`` included), :mod:`aiayn.engines.ctranslate2` (the
CTranslate2 engine itself, without PyTorch) and :mod:`aiayn.interop.pretrained` (``aiayn import``: a Marian / OPUS-MT
model read into a run dir).
"""
