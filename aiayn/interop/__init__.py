"""Interop: aiayn's models in and out of other engines and formats.

One module per command: :mod:`aiayn.interop.export` (``aiayn export``: CTranslate2, Hugging Face, and the
CTranslate2 engine itself), :mod:`aiayn.interop.ct2` (``--engine``: which engine decodes, ``auto`` included) and
:mod:`aiayn.interop.pretrained` (``aiayn import``: a Marian / OPUS-MT model read into a run dir).
"""
