"""A fourth body in one folder (the seam's proof, tests/model/test_bodies.py): pre-norm
blocks with RMSNorm and SwiGLU, no biases, no positions (NeoBERT's parts without its RoPE);
``electra.model.bodies.register(BODY)`` is the one line that adds it."""

from electra.model.bodies.spec import Body
from toy_body import hf, recipes
from toy_body.model import ToyBlock, ToyEncoder, ToyGDESEmbeddings, toy_macs_per_token

BODY = Body("toy", ToyEncoder, ToyGDESEmbeddings, ToyBlock, toy_macs_per_token, bias=False,
            check=recipes.check, defaults=recipes.DEFAULTS, recipes=recipes.RECIPES,
            adapter=hf.ADAPTER, settings=recipes.ToySettings)
