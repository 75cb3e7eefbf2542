"""ModernBERT's body: RoPE, pre-LN without biases, GeGLU, global and local attention."""

from pathlib import Path

from electra.model.bodies.modernbert import hf, recipes
from electra.model.bodies.modernbert.model import (
    ModernBlock,
    ModernEncoder,
    ModernGDESEmbeddings,
    ModernHead,
    modern_length_error,
    modern_macs_per_token,
)
from electra.model.bodies.spec import Body, as_wide_as_blocks

BODY = Body("modernbert", ModernEncoder, ModernGDESEmbeddings, ModernBlock,
            modern_macs_per_token, bias=False, length_error=modern_length_error,
            task_head=ModernHead, check=recipes.check, check_exportable=as_wide_as_blocks,
            defaults=recipes.DEFAULTS, recipes=recipes.RECIPES, adapter=hf.ADAPTER,
            folder=Path(__file__).parent,
            settings=recipes.ModernBertSettings)
