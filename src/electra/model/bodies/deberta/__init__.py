"""DeBERTa's body (V3's settings): disentangled attention over log-bucketed relative
positions."""

from electra.model.bodies.deberta import hf, recipes
from electra.model.bodies.deberta.model import (
    DebertaBlock,
    DebertaEncoder,
    DebertaGDESEmbeddings,
    deberta_macs_per_token,
)
from electra.model.bodies.spec import Body, as_wide_as_blocks

BODY = Body("deberta", DebertaEncoder, DebertaGDESEmbeddings, DebertaBlock,
            deberta_macs_per_token, packed_rows=False, rtd_context=True, check=recipes.check,
            check_exportable=as_wide_as_blocks, defaults=recipes.DEFAULTS,
            recipes=recipes.RECIPES, adapter=hf.ADAPTER,
            settings=recipes.DebertaSettings)
