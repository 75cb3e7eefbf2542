"""Shared fixtures: tiny configs and batches made in-process (no data from outside the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from electra.config import ModelConfig, model_preset
from electra.io.tokenizer import SpecialTokens

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

SPECIAL = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)


def tiny_config(**overrides) -> ModelConfig:
    """A very small model: 2 layers, width 32, vocabulary 101."""
    base = dict(vocab_size=101, embedding_size=24, hidden_size=32, num_layers=2, num_heads=4,
                intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.0,
                attention_dropout=0.0)
    return model_preset("tiny", **{**base, **overrides})


def make_batch(lengths: list[int], T: int, vocab_size: int = 101, seed: int = 0):
    """[CLS] w... [SEP] rows of the given lengths, padded to T; returns ids, mask, types."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), T), SPECIAL.pad, dtype=torch.long)
    for r, n in enumerate(lengths):
        ids[r, 0] = SPECIAL.cls
        ids[r, 1 : n - 1] = torch.randint(5, vocab_size, (n - 2,), generator=g)
        ids[r, n - 1] = SPECIAL.sep
    mask = (ids != SPECIAL.pad).long()
    types = torch.zeros_like(ids)
    return ids, mask, types


@pytest.fixture
def special() -> SpecialTokens:
    return SPECIAL


def cli_error(capsys, *args) -> str:
    """Run `electra ARGS`; assert exit code 2 and a one-line error; return that line."""
    from electra.cli import main

    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def shared_data(sub: str) -> Path:
    """A path under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / sub
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real-data folder is not beside the checkout)")
    return path


@pytest.fixture(scope="session")
def letters_data(tmp_path_factory) -> Path:
    """A letters corpus (test_data.write_corpus) packed into 32-token examples with a
    validation split: what the pretraining-loop tests train on."""
    from test_data import write_corpus

    from electra.data.prepare import PrepareOptions, prepare
    from electra.io.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("letters")
    text = root / "c.txt"
    write_corpus(text, n_docs=80)
    train_tokenizer([str(text)], 120, root / "tok")
    prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(root / "tok"), out=str(
        root / "data"), seq_len=32, val_fraction=0.2, quiet=True))
    return root / "data"
