"""Fine-tuning tasks: each head family in its own module, in one registry."""
