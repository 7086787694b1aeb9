"""Data: parallel text to a prepared data directory, and the directory to token-bucketed batches (paper §5.1).

The entrance is :mod:`aiayn.data.prepare` (``aiayn prepare``: text validated, filtered, tokenized and written) and
:mod:`aiayn.data.datadir` (``DataDir``: a prepared directory, read). The rest: :mod:`aiayn.data.tokenizer` (the
SentencePiece vocabulary a model reads and writes), :mod:`aiayn.data.batches` (batches by length),
:mod:`aiayn.data.corpora` (known corpora, downloaded or bundled) and :mod:`aiayn.data.multilingual` (many languages in
one data directory, a tag naming each target). Nothing here imports decoding, translation, training or serving.
"""
