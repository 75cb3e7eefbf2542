"""The pretraining objectives (Clark et al., 2020), one module each, readable line by line.

ELECTRA (``objective.kind = "electra"``, section 2, ``electra.py``):

    1. choose positions M: ~15% of each sequence's candidate tokens (no specials, no padding),
       as single tokens, whole words or spans of words (``unit``); the budget is in tokens
    2. x_masked:   most chosen positions become [MASK] (the rest keep the token, or BERT's
                   random token), the generator predicts the originals there:
                   L_MLM = mean_{i in M} -log p_G(x_i | x_masked)
    3. x_corrupt:  chosen positions take a *sample* from p_G (no gradient through sampling)
    4. labels:     replaced_i = [x_corrupt_i != x_i]  (a sample equal to the original is
                   labelled original)
    5. L_disc:     mean over non-pad tokens of BCE(D(x_corrupt)_i, replaced_i)
    6. L = L_MLM + λ·L_disc, one joint update.

The paper's baselines and ablations (section 3.2): ``mlm`` (BERT), ``random`` (no
generator), ``electra15``, ``replace_mlm``, ``all_tokens_mlm``, each its own module.

    masking.py       the inputs (Batch, Draws); steps 1-2: positions (chosen once) and x_masked
    sampling.py      step 3: inverse-CDF / Gumbel sampling, unigram draws, x_corrupt
    losses.py        the fused MLM cross-entropy, BCE, the copy loss, the statistics
    base.py          what an objective is (traits, forward) and the shared steps, each
                     returning its Term (a loss and its statistics)
    registry.py      every objective by name: config validation, FLOPs, compare, export
    pretraining.py   the modules trained together, and the one forward DDP/FSDP wrap
    flops.py         training FLOPs of a step, per objective

A training step draws its ``Noise`` for the whole global batch up front and each process (and
each accumulation micro-batch) takes its rows, so masking and sampling do not depend on the
world size or the accumulation; ``Norm`` likewise averages the losses over the global batch.
"""
