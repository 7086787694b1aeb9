"""Training (paper §5): a run trained, resumed, watched and scored.

The entrance is :mod:`aiayn.training.train` (the loop) with :mod:`aiayn.training.recipes` (how a run's configuration
is resolved) and :mod:`aiayn.training.resume` (a run directory started or resumed). Around it:
:mod:`aiayn.training.metrics` and :mod:`aiayn.training.plots` (what a run reports), :mod:`aiayn.training.evaluate`
(BLEU and chrF with sacreBLEU), :mod:`aiayn.training.distributed` (torchrun) and :mod:`aiayn.training.distill`
(sequence-level knowledge distillation).
"""
