"""Decoding: what turns a model and a source into hypotheses, apart from the model itself (paper §6.1).

The entrance is :mod:`aiayn.decoding.search` (greedy, beam search and sampling on the incremental cache), with the
types every search and engine share in :mod:`aiayn.decoding.hypotheses`. Around it: :mod:`aiayn.decoding.steps` (the
decoder's step, traced or compiled), :mod:`aiayn.decoding.topk`, :mod:`aiayn.decoding.constraints` (phrases a
translation must hold), :mod:`aiayn.decoding.shortlist` and :mod:`aiayn.decoding.lexicon` (the output layer limited
to likely words), :mod:`aiayn.decoding.align` (word alignments from the attention) and
:mod:`aiayn.decoding.hypotheses` (how sure a hypothesis is). Engines use these; nothing here imports an engine.
"""
