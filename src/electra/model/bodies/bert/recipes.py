"""The BERT body's recipes: the paper's sizes (Table 6) with their pretraining
hyperparameters, and ``tiny`` for tests and the demo; its published defaults."""

from __future__ import annotations

from electra.config import ModelConfig
from electra.model.bodies.spec import Recipe

DEFAULTS = {"hidden_dropout": 0.1, "attention_dropout": 0.1, "layer_norm_eps": 1e-12}

RECIPES = {
    # For tests and the demo: a few minutes of CPU pretraining show it learning.
    "tiny": Recipe(ModelConfig(embedding_size=128, hidden_size=128, num_layers=4, num_heads=2,
                               intermediate_size=512, max_position_embeddings=512),
                   {"lr": 1e-3, "batch_size": 32, "warmup_steps": 100, "max_steps": 2000}),
    # The paper's Table 6: ELECTRA-Small, -Base, -Large (Small uses seq 128, Base 512).
    "small": Recipe(ModelConfig(embedding_size=128, hidden_size=256, num_layers=12,
                                num_heads=4, intermediate_size=1024, generator_size=0.25),
                    {"lr": 5e-4, "batch_size": 128, "warmup_steps": 10_000,
                     "max_steps": 1_000_000}),
    "base": Recipe(ModelConfig(embedding_size=768, hidden_size=768, num_layers=12,
                               num_heads=12, intermediate_size=3072, generator_size=1 / 3),
                   {"lr": 2e-4, "batch_size": 256, "warmup_steps": 10_000,
                    "max_steps": 766_000}),
    # ELECTRA-Large masks 25% (Small and Base the default 15%).
    "large": Recipe(ModelConfig(embedding_size=1024, hidden_size=1024, num_layers=24,
                                num_heads=16, intermediate_size=4096, generator_size=0.25),
                    {"lr": 2e-4, "batch_size": 2048, "warmup_steps": 10_000,
                     "max_steps": 400_000}, {"mask_prob": 0.25}),
}
