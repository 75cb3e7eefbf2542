"""`electra pairs` (issue 72): (query, positive) pairs from raw text alone, two spans of one
document cropped independently (Contriever), streamed; and the two stages a user with only a
corpus runs: pairs -> contrastive stage 1 -> supervised stage 2."""

from __future__ import annotations

import json
import random

import torch

import electra
from electra.cli import main
from electra.commands.pairs import Cropping, pieces
from electra.data.tokenizer import train_tokenizer

WORDS = [f"{a}{b}" for a in "bcdfghjklm" for b in "aeiou"]


def corpus(path, docs: list[int], seed: int = 0) -> list[list[str]]:
    """A text file of documents of ``docs`` words each (a few words a line, a blank line
    between documents); returns each document's words."""
    rng, out, text = random.Random(seed), [], []
    for n in docs:
        words = [rng.choice(WORDS) for _ in range(n)]
        out.append(words)
        text.append("\n".join(" ".join(words[i:i + 7]) for i in range(0, n, 7)))
    path.write_text("\n\n".join(text) + "\n")
    return out


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_of(span: str, words: list[str]) -> bool:
    """Whether ``span`` is a run of consecutive ``words``."""
    s = span.split()
    return any(words[i:i + len(s)] == s for i in range(len(words) - len(s) + 1))


def test_each_pair_is_two_crops_of_one_piece_of_one_document(tmp_path):
    """Documents of 10 (too short), 40 and 700 words, pieces of 256: 1 + 3 pieces (256,
    256, 188 words); each pair's spans are runs of its piece, 10-50% of its length, drawn
    independently; the same seed gives the same file, another seed other crops."""
    docs = corpus(tmp_path / "c.txt", [10, 40, 700])
    assert electra.pairs(input=[str(tmp_path / "c.txt")], out=str(tmp_path / "p.jsonl"),
                         progress=False) == 4
    want = [docs[1], docs[2][:256], docs[2][256:512], docs[2][512:]]
    assert [len(p) for p in want] == [40, 256, 256, 188]
    got = read(tmp_path / "p.jsonl")
    for pair, piece in zip(got, want, strict=True):
        for span in (pair["query"], pair["positive"]):
            assert run_of(span, piece)
            assert round(0.1 * len(piece)) <= len(span.split()) <= round(0.5 * len(piece))
    assert any(p["query"] != p["positive"] for p in got)
    electra.pairs(input=[str(tmp_path / "c.txt")], out=str(tmp_path / "q.jsonl"),
                  progress=False)
    assert read(tmp_path / "q.jsonl") == got
    electra.pairs(input=[str(tmp_path / "c.txt")], out=str(tmp_path / "r.jsonl"), seed=1,
                  progress=False)
    assert read(tmp_path / "r.jsonl") != got


def test_long_documents_stream_as_the_same_pieces(tmp_path):
    """A document of 5,000 words is cut as it is read (never held whole past two pieces):
    the same pieces as cutting it at once; the last piece of fewer than min_words is out."""
    (doc,) = corpus(tmp_path / "c.txt", [5000], seed=3)
    crop = Cropping(chunk_words=64, min_words=16)
    got = list(pieces([tmp_path / "c.txt"], crop))
    assert got == [doc[i:i + 64] for i in range(0, 5000, 64) if len(doc[i:i + 64]) >= 16]
    assert len(got) == 78  # 5,000 = 78 x 64 + 8: the last 8 words left out


def test_deletion_and_a_sample_of_pairs(tmp_path):
    """--delete drops words from each span (what is left is in the piece's order); --max-pairs
    keeps that many pieces' pairs, in the corpus's order."""
    docs = [[f"d{d}w{i}" for i in range(60)] for d in range(30)]  # each word names its place
    (tmp_path / "c.txt").write_text("\n\n".join(" ".join(d) for d in docs) + "\n")
    assert main(["pairs", "--input", str(tmp_path / "c.txt"), "--out", str(tmp_path / "p.jsonl"),
                 "--delete", "0.5", "--min-ratio", "0.5", "--max-ratio", "0.5",
                 "--max-pairs", "10", "--quiet"]) == 0
    got = read(tmp_path / "p.jsonl")
    assert len(got) == 10
    order = []
    for pair in got:
        for span in (pair["query"], pair["positive"]):
            place = [tuple(int(x) for x in w[1:].split("w")) for w in span.split()]
            assert len({d for d, _ in place}) == 1 and 1 <= len(place) < 30
            at = [i for _, i in place]
            assert at == sorted(at) and at[-1] - at[0] < 30  # within one run of 30
        order.append(place[0][0])
    assert order == sorted(order) and len(set(order)) == 10


def test_a_corpus_alone_trains_an_embedding_model_in_two_stages(tmp_path):
    """pairs from the corpus -> `finetune --task embedding` (stage 1) -> stage 2 from its
    model on curated pairs: each stage loads the one before (its encoder, not a fresh one)."""
    corpus(tmp_path / "c.txt", [80] * 40)
    train_tokenizer([str(tmp_path / "c.txt")], 200, tmp_path / "tok")
    assert main(["pairs", "--input", str(tmp_path / "c.txt"), "--out",
                 str(tmp_path / "pairs.jsonl"), "--chunk-words", "40", "--quiet"]) == 0
    rng = random.Random(1)
    (tmp_path / "curated.jsonl").write_text("".join(
        json.dumps({"query": w, "positive": f"{w} {rng.choice(WORDS)}"}) + "\n" for w in WORDS))
    common = ["--task", "embedding", "--dev", str(tmp_path / "curated.jsonl"), "--quiet",
              "--set", "precision=fp32", "--set", "batch_size=16", "--set", "max_length=32",
              "--set", "epochs=1"]
    assert main(["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
                 "--train", str(tmp_path / "pairs.jsonl"), *common, "--out",
                 str(tmp_path / "stage1")]) == 0
    assert main(["finetune", "--model", str(tmp_path / "stage1/seed-1"), "--train",
                 str(tmp_path / "curated.jsonl"), *common, "--out",
                 str(tmp_path / "stage2")]) == 0
    result = json.loads((tmp_path / "stage2/results.json").read_text())
    assert result["model"] == str(tmp_path / "stage1/seed-1")
    from safetensors.torch import load_file

    from electra.commands.finetune import model_source
    stage1 = load_file(tmp_path / "stage1/seed-1/model.safetensors")
    loaded = model_source(str(tmp_path / "stage1/seed-1")).encoder
    assert loaded and all(torch.equal(v, stage1[f"encoder.{k}"]) for k, v in loaded.items())
