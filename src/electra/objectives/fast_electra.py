"""Fast-ELECTRA (Dong et al., 2023, arXiv 2310.07347): ELECTRA with the generator replaced by
an existing masked LM, kept frozen, whose samples (at a sampling temperature that usually
falls over the run: objective.temperature -> temperature_end) fill the chosen positions.

    L = λ · mean_{non-pad i} BCE(D(x_corrupt)_i, [x_corrupt_i != x_i])

No generator loss, no backward through it, no optimizer state for it: it runs forward only
(what the FLOP count counts of it, ``electra.objectives.flops``). Its MLM loss and accuracy on
the chosen positions are logged as statistics (``gen_loss``, ``gen_acc``: how hard its
replacements are), not trained. The generator is ``objective.generator`` (any masked LM of
the data's vocabulary: a transformers ``*ForMaskedLM`` folder or hub id, a run, a run's
checkpoint), loaded by ``electra.saved.start.load_generator``.
"""

from __future__ import annotations

from electra.objectives.electra import Electra


class FastElectra(Electra):
    """ELECTRA's forward with the generator frozen (``generate`` runs it under no gradient
    and the loss leaves its MLM term out): only the traits differ."""

    name = "fast_electra"
    summary = "ELECTRA with a frozen, pretrained generator (Fast-ELECTRA)"
    generator = False  # none trained: the frozen one is attached (objective.generator)
    frozen_generator = True
    two_stage = False
