"""The training machinery both loops share: the trainer, where it runs (runtime), how it
spreads over processes (parallel), the optimizer, checkpoints, metrics."""
