"""Data in the forms users have it (issue 17): Parquet, Arrow and `datasets.save_to_disk`
input equal to the same text as .txt; BPE and Unigram tokenizers with their own special
names, end to end into transformers; word starts for every tokenizer kind; --overflow carry
keeps every token."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import cli_error, write_corpus

from electra.cli import main
from electra.data.loader import ShardDataset
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import SpecialTokens, load_tokenizer, special_names, train_tokenizer
from electra.errors import UserError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SHARDS = ("ids.bin", "segments.bin", "word_starts.bin")


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> tuple[Path, list[list[str]], Path]:
    root = tmp_path_factory.mktemp("inputs")
    docs = write_corpus(root / "c.txt", n_docs=50)
    train_tokenizer([str(root / "c.txt")], vocab_size=120, out=root / "tok")
    return root, docs, root / "tok"


def prep(root: Path, inputs: list[Path], out: str, tok: Path, **kw) -> dict:
    opts = dict(inputs=[str(p) for p in inputs], tokenizer=str(tok), out=str(root / out),
                seq_len=32, chunk_bytes=1500, quiet=True)
    return prepare(PrepareOptions(**{**opts, **kw}))


def same_shards(a: Path, b: Path) -> None:
    ma, mb = (json.loads((x / "meta.json").read_text()) for x in (a, b))
    assert ma["splits"] == mb["splits"] and ma["documents"] == mb["documents"]
    for split in ma["splits"]:
        for f in SHARDS:
            assert (a / split / f).read_bytes() == (b / split / f).read_bytes(), (split, f)


def records(docs: list[list[str]]) -> list[str]:
    return ["\n".join(d) for d in docs]


def test_parquet_arrow_and_datasets_folders_equal_the_txt_path(docs):
    root, dd, tok = docs
    ref = root / "ref"
    prep(root, [root / "c.txt"], "ref", tok, val_fraction=0.2)
    table = pa.table({"id": list(range(len(dd))), "text": records(dd)})
    pq.write_table(table, root / "c.parquet", row_group_size=7)  # several row groups
    prep(root, [root / "c.parquet"], "pq", tok, val_fraction=0.2)
    same_shards(ref, root / "pq")
    with pa.OSFile(str(root / "c.arrow"), "wb") as sink, pa.ipc.new_file(
            sink, table.schema) as writer:  # the Arrow IPC file format
        for batch in table.to_batches(max_chunksize=9):
            writer.write_batch(batch)
    prep(root, [root / "c.arrow"], "arrow", tok, val_fraction=0.2)
    same_shards(ref, root / "arrow")
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"body": records(dd), "n": list(range(len(dd)))})
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(
        str(root / "dsd"))
    prep(root, [root / "dsd"], "from_dsd", tok, val_fraction=0.2, text_field="body")
    same_shards(ref, root / "from_dsd")
    prep(root, [root / "dsd/train"], "dsd_train", tok, val_fraction=0.2, text_field="body",
         split="train")
    same_shards(ref, root / "dsd_train")
    meta = json.loads((root / "from_dsd/meta.json").read_text())
    assert list(meta["inputs"]) == [str(root / "dsd/train/data-00000-of-00001.arrow")]
    # the test split alone: three documents
    m = prep(root, [root / "dsd"], "dsd_test", tok, text_field="body", split="test")
    assert m["documents"] == 3


def test_a_parquet_folder_is_read_in_name_order(docs):
    root, dd, tok = docs
    (root / "parts").mkdir()
    for i in range(0, len(dd), 20):
        pq.write_table(pa.table({"text": records(dd[i:i + 20])}),
                       root / f"parts/part-{i // 20:02d}.parquet")
    prep(root, [root / "parts"], "from_parts", tok)
    prep(root, [root / "c.txt"], "ref_plain", tok)
    same_shards(root / "ref_plain", root / "from_parts")


def test_table_inputs_refuse_what_they_cannot_read(docs):
    root, dd, tok = docs
    pq.write_table(pa.table({"body": records(dd[:3]), "id": [1, 2, 3]}), root / "b.parquet")
    with pytest.raises(UserError, match=r"no 'text' field \(the fields are body, id\)"):
        prep(root, [root / "b.parquet"], "x1", tok)
    with pytest.raises(UserError, match="the 'id' field holds int64, not text"):
        prep(root, [root / "b.parquet"], "x2", tok, text_field="id")
    (root / "fake.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="cannot be read as Parquet"):
        prep(root, [root / "fake.parquet"], "x3", tok)
    assert not any((root / n).exists() for n in ("x1", "x2", "x3", "x1.partial"))


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_word_starts_follow_the_tokenizers_own_words(docs, kind):
    root, _, _ = docs
    tok_dir = root / f"tok_{kind}"
    tok = train_tokenizer([str(root / "c.txt")], vocab_size=150, out=tok_dir, model=kind)
    names = special_names(tok)
    assert names == {"bpe": {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>",
                             "mask": "<mask>"},
                     "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]",
                                 "sep": "[SEP]", "mask": "[MASK]"}}[kind]
    meta = prep(root, [root / "c.txt"], f"d_{kind}", tok_dir)
    assert meta["special_token_names"] == names
    data = ShardDataset(root / f"d_{kind}", "train", word_starts=True)
    s = data.special
    for i in range(0, len(data), 7):
        ids = data.ids[i].astype(np.int64)
        starts = np.unpackbits(data.word_starts[i])
        n = int(data.segments[i][1])
        for pos in range(1, n):
            if ids[pos] in (s.cls, s.sep):
                continue
            piece = tok.id_to_token(int(ids[pos]))
            # BPE marks a word's first piece with "Ġ", Unigram with "▁" (Metaspace); a
            # segment's first token also starts one (a sentence may begin mid-word only when
            # a line longer than an example was cut).
            marked = piece.startswith("Ġ" if kind == "bpe" else "▁")
            if ids[pos - 1] not in (s.cls, s.sep):
                assert bool(starts[pos]) == marked, (i, pos, piece)


def test_a_bpe_tokenizer_with_roberta_names_runs_into_transformers(docs, tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch

    root, _, _ = docs
    tok_dir = tmp_path / "bpe"
    assert main(["tokenizer", "train", "--model", "bpe", "--input", str(root / "c.txt"),
                 "--vocab-size", "150", "--out", str(tok_dir)]) == 0
    assert main(["prepare", "--input", str(root / "c.txt"), "--tokenizer", str(tok_dir),
                 "--seq-len", "32", "--out", str(tmp_path / "data")]) == 0
    meta = json.loads((tmp_path / "data/meta.json").read_text())
    tok = load_tokenizer(tok_dir)
    assert meta["special_tokens"] == SpecialTokens.of(tok).to_dict()
    assert meta["special_tokens"]["cls"] == tok.token_to_id("<s>")
    (tmp_path / "t.toml").write_text(
        'preset = "tiny"\n[model]\nhidden_size = 32\nembedding_size = 32\nnum_layers = 1\n'
        'num_heads = 2\nintermediate_size = 64\nmax_position_embeddings = 64\n'
        '[train]\nbatch_size = 4\nmax_steps = 3\nwarmup_steps = 1\nlog_every = 1\n'
        'precision = "fp32"\n')
    assert main(["pretrain", "--config", str(tmp_path / "t.toml"), "--data",
                 str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf/discriminator")
    assert (hf_tok.cls_token, hf_tok.sep_token, hf_tok.pad_token, hf_tok.mask_token,
            hf_tok.unk_token) == ("<s>", "</s>", "<pad>", "<mask>", "<unk>")
    ours = load_tokenizer(tmp_path / "run/discriminator")
    pair = ("aaa bb cccc", "dd e")
    assert hf_tok(*pair)["input_ids"] == ours.encode(*pair).ids
    assert ours.encode(*pair).ids[0] == ours.token_to_id("<s>")
    model, info = transformers.AutoModelForPreTraining.from_pretrained(
        tmp_path / "hf/discriminator", output_loading_info=True)
    assert not any(info.values()), info
    from electra.saved import folders

    disc = folders.load(tmp_path / "run", "discriminator")[0].eval()
    enc = hf_tok(*pair, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(
            disc(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
            model.eval()(**enc).logits, atol=1e-5, rtol=1e-5)
    # fine-tuning encodes with the same roles: <s> A </s> B </s>, padded with <pad>
    from electra.data.examples import Example, encode

    batch = encode(ours, [Example("aaa bb", "cc", None), Example("a", None, None)], 16, {}, False)
    assert batch["input_ids"][1, -1] == ours.token_to_id("<pad>")
    assert batch["input_ids"][:, 0].tolist() == [ours.token_to_id("<s>")] * 2
    # the exported folder imports back with the same roles
    assert main(["import", str(tmp_path / "hf/discriminator"), "--out",
                 str(tmp_path / "back")]) == 0
    assert special_names(load_tokenizer(tmp_path / "back/discriminator")) == \
        special_names(ours)


def test_named_roles_for_a_tokenizer_with_odd_names(docs, tmp_path, capsys):
    """A tokenizer.json with no post-processor and names no rule guesses: prepare refuses it
    naming the role and the flag; --special-tokens names them, and they travel with the data
    and the run."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root, _, _ = docs
    tok = Tokenizer(models.BPE(unk_token="%unk%"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([str(root / "c.txt")], trainers.BpeTrainer(
        vocab_size=100, special_tokens=["%pad%", "%unk%", "%bos%", "%eos%", "%hole%"],
        show_progress=False))
    tok.save(str(tmp_path / "odd.json"))
    args = ["prepare", "--input", str(root / "c.txt"), "--tokenizer",
            str(tmp_path / "odd.json"), "--seq-len", "32", "--out", str(tmp_path / "d")]
    err = cli_error(capsys, *args)
    assert "the tokenizer has no pad token" in err and "--special-tokens pad=TOKEN" in err
    assert not (tmp_path / "d").exists()
    names = "pad=%pad%,cls=%bos%,sep=%eos%,mask=%hole%"
    assert main([*args, "--special-tokens", names]) == 0
    meta = json.loads((tmp_path / "d/meta.json").read_text())
    assert meta["special_token_names"] == {"pad": "%pad%", "unk": "%unk%", "cls": "%bos%",
                                           "sep": "%eos%", "mask": "%hole%"}
    assert meta["special_tokens"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    data = ShardDataset(tmp_path / "d", "train")
    assert (data.ids[:, 0] == 2).all()
    # the data folder's tokenizer names its roles itself, and encodes pairs as packed
    again = load_tokenizer(tmp_path / "d")
    assert special_names(again) == meta["special_token_names"]
    assert again.encode("aa", "bb").ids[0] == 2 and again.encode("aa").ids[-1] == 3


def test_overflow_carry_keeps_every_token_in_order(docs):
    root, _, tok = docs
    drop = prep(root, [root / "c.txt"], "drop", tok, seq_len=16)
    assert drop["tokens_dropped"] > 0
    assert drop["tokens_packed"] + drop["tokens_dropped"] == drop["tokens_in"]
    carry = prep(root, [root / "c.txt"], "carry", tok, seq_len=16, overflow="carry")
    assert carry["overflow"] == "carry" and carry["tokens_dropped"] == 0
    assert carry["tokens_packed"] == carry["tokens_in"] == drop["tokens_in"]
    data = ShardDataset(root / "carry", "train")
    s = data.special
    text = np.concatenate([row[(row != s.cls) & (row != s.sep) & (row != s.pad)]
                           for row in data.ids])
    t = load_tokenizer(tok)
    lines = [ln for ln in (root / "c.txt").read_text().splitlines() if ln]
    expected = np.concatenate([t.encode(ln, add_special_tokens=False).ids for ln in lines])
    np.testing.assert_array_equal(text, expected)  # every token, in the text's order
    two = prep(root, [root / "c.txt"], "carry2", tok, seq_len=16, overflow="carry", workers=2)
    same_shards(root / "carry", root / "carry2")
    assert two["tokens_packed"] == carry["tokens_packed"]
