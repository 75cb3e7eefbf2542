"""BERT's (ELECTRA's) body: absolute positions, post-LN, GELU, full attention."""

from pathlib import Path

from electra.model.bodies.bert import hf, recipes
from electra.model.bodies.bert.model import Block, Encoder, GDESEmbeddings, bert_macs_per_token
from electra.model.bodies.spec import Body

BODY = Body("bert", Encoder, GDESEmbeddings, Block, bert_macs_per_token,
            defaults=recipes.DEFAULTS, recipes=recipes.RECIPES, adapter=hf.ADAPTER,
            folder=Path(__file__).parent)
