"""Embedding fine-tuning: contrastive (InfoNCE) training on pairs or triplets."""
