"""Tokenizer training, packing into shards, and the loader, on a corpus the tests write."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import small_model, write_corpus

from electra.cli import main
from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.data import prepare as prep
from electra.data.loader import BatchLoader, Prefetched, ShardDataset
from electra.data.packing import pack_rows
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import load_tokenizer, tokenizer_checksum, train_tokenizer
from electra.errors import UserError
from electra.run_config import RunConfig
from electra.train.metrics import iter_metrics


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corpus")
    text = root / "corpus.txt"
    write_corpus(text)
    tok_dir = root / "tok"
    train_tokenizer([str(text)], vocab_size=120, out=tok_dir)
    return text, tok_dir


def run_prepare(corpus, out: Path, **kw) -> dict:
    text, tok = corpus
    opts = dict(inputs=[str(text)], tokenizer=str(tok), out=str(out), seq_len=32,
                chunk_bytes=2000, quiet=True)
    return prepare(PrepareOptions(**{**opts, **kw}))


def test_tokenizer_has_special_tokens_first_and_round_trips(corpus):
    _, tok_dir = corpus
    tok = load_tokenizer(tok_dir)
    vocab = tok.get_vocab()
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    text = "aaa bb ccccc dd"
    assert tok.decode(tok.encode(text).ids) == text
    assert tok.encode("AAA").ids == tok.encode("aaa").ids  # lowercased
    # vocab.txt alone loads to the same tokenization.
    assert load_tokenizer(tok_dir / "vocab.txt").encode(text).ids == tok.encode(text).ids


def test_examples_have_cls_a_sep_b_sep_structure(corpus, tmp_path):
    meta = run_prepare(corpus, tmp_path / "out")
    ds = ShardDataset(tmp_path / "out")
    assert len(ds) == meta["splits"]["train"]["examples"] > 20
    b = ds.batch(np.arange(len(ds)))
    ids, types, mask = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    two_segments = 0
    for i in range(len(ds)):
        n = int(mask[i].sum())
        row = ids[i, :n].tolist()
        assert row[0] == 2 and row[-1] == 3  # [CLS] ... [SEP]
        assert (ids[i, n:] == 0).all()  # [PAD] after
        seps = [j for j, t in enumerate(row) if t == 3]
        assert len(seps) in (1, 2)
        assert 2 not in row[1:] and 4 not in row  # no stray [CLS] / [MASK]
        end_a = seps[0] + 1
        assert (types[i, :end_a] == 0).all() and (types[i, n:] == 0).all()
        assert (types[i, end_a:n] == 1).all()
        if len(seps) == 2:
            two_segments += 1
            assert seps[1] == n - 1 and end_a < n - 1
        else:
            assert end_a == n
    assert 0 < two_segments < len(ds)  # both kinds occur (about 10% single-segment)


def test_no_example_mixes_documents_and_tokens_keep_their_order(corpus, tmp_path):
    run_prepare(corpus, tmp_path / "out")
    tok = load_tokenizer(corpus[1])
    id_to_letters = {i: set(t.replace("#", "")) for t, i in tok.get_vocab().items()
                     if not t.startswith("[")}
    ds = ShardDataset(tmp_path / "out")
    for i in range(len(ds)):
        n = int(ds.segments[i, 1])
        letters = set().union(*(id_to_letters[int(t)] for t in ds.ids[i, :n]
                                if int(t) > 4))
        assert len(letters) == 1, letters


def test_workers_do_not_change_the_output(corpus, tmp_path):
    m1 = run_prepare(corpus, tmp_path / "w1", workers=1, val_fraction=0.2)
    for n in (2, 3):  # 3: the round-robin of chunks does not divide their number
        m2 = run_prepare(corpus, tmp_path / f"w{n}", workers=n, val_fraction=0.2)
        assert m1["splits"] == m2["splits"]
        for split in ("train", "val"):
            for name in ("ids.bin", "segments.bin", "word_starts.bin"):
                a = (tmp_path / "w1" / split / name).read_bytes()
                assert a == (tmp_path / f"w{n}" / split / name).read_bytes()
    m3 = run_prepare(corpus, tmp_path / "s2", seed=99, val_fraction=0.2)
    assert (tmp_path / "s2/train/ids.bin").read_bytes() != (
        tmp_path / "w1/train/ids.bin").read_bytes()
    assert m3["format_version"] == 1


def test_pack_rows_places_each_example_first_fit():
    # 0 and 2 fill rows alone; 3 and 5 join 1's row; 4 does not fit there and begins a row.
    assert pack_rows([32, 5, 32, 12, 20, 10], 32) == [[0], [1, 3, 5], [2], [4]]
    assert pack_rows([], 32) == []


def examples_of(ds: ShardDataset) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every example of a split as (its ids, its token types), split out of packed rows."""
    b = ds.batch(np.arange(len(ds)))
    groups = b.get("sequence_ids", b["attention_mask"])
    out = []
    for i in range(len(ds)):
        for k in range(1, int(groups[i].max()) + 1):
            at = groups[i] == k
            out.append((tuple(b["input_ids"][i][at].tolist()),
                        tuple(b["token_type_ids"][i][at].tolist())))
    return out


def test_packed_rows_hold_the_same_examples_with_less_padding(corpus, tmp_path):
    """--pack fills rows with several examples side by side: the same examples (ids and
    segments) in fewer rows, each beginning with [CLS], the padding gone but for the rows'
    ends; the same for any --workers; format 2, which `--verify` checks."""
    plain = run_prepare(corpus, tmp_path / "plain", val_fraction=0.2)
    packed = run_prepare(corpus, tmp_path / "packed", val_fraction=0.2, pack=True)
    assert (packed["format_version"], packed["packed"]) == (2, True)
    for split in ("train", "val"):
        a, b = ShardDataset(tmp_path / "plain", split), ShardDataset(tmp_path / "packed", split)
        assert sorted(examples_of(a)) == sorted(examples_of(b))
        assert len(b) <= len(a) and packed["splits"][split]["sequences"] == len(a)
        assert packed["splits"][split]["tokens"] == plain["splits"][split]["tokens"]
        rows = b.batch(np.arange(len(b)))
        starts = torch.diff(rows["sequence_ids"], dim=1, prepend=torch.zeros(len(b), 1)) > 0
        assert (rows["input_ids"][starts] == 2).all()  # [CLS] begins every example
        assert (rows["input_ids"][~starts & (rows["sequence_ids"] > 0)] != 2).all()
    # rows are packed within each chunk of the text (here 2,000 bytes: a few examples each)
    full = lambda m: m["splits"]["train"]["tokens"] / (  # noqa: E731
        m["splits"]["train"]["examples"] * 32)
    assert 1 - full(packed) < (1 - full(plain)) / 2, (full(plain), full(packed))
    run_prepare(corpus, tmp_path / "w2", val_fraction=0.2, pack=True, workers=2)
    for name in ("ids.bin", "segments.bin", "word_starts.bin", "sequences.bin", "types.bin"):
        assert (tmp_path / "packed/train" / name).read_bytes() == (
            tmp_path / "w2/train" / name).read_bytes()
    assert prep.verify_data(str(tmp_path / "packed"))["train"]["examples"] == len(
        ShardDataset(tmp_path / "packed"))


def test_packed_data_pretrains_alike_padded_and_unpadded(corpus, tmp_path):
    """Pretraining reads packed rows as they are (each example attending within itself):
    the padded layout and the unpadded one give the same losses in fp32."""
    run_prepare(corpus, tmp_path / "packed", val_fraction=0.2, pack=True)
    losses = []
    for unpad in (False, True):
        cfg = RunConfig(model=small_model(vocab_size=120, hidden_dropout=0.0,
                                          attention_dropout=0.0),
                        train=TrainConfig(batch_size=8, max_steps=4, warmup_steps=1,
                                          log_every=1, eval_every=4, eval_batches=1,
                                          save_every=4, precision="fp32", unpad=unpad))
        out = tmp_path / f"run-{unpad}"
        pretrain(PretrainOptions(data=str(tmp_path / "packed"), out=str(out), config=cfg,
                                 progress=False))
        losses.append([(r["gen_loss"], r["disc_loss"]) for r in iter_metrics(out)])
        assert "val_disc_auc" in list(iter_metrics(out))[-1]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_ctrl_c_while_a_chunk_is_being_sent_stops_the_workers_at_once(corpus):
    """Ctrl-C while the main thread writes a 16 MB chunk to a worker that is still starting
    (nothing reads its pipe yet): the send is interrupted, and close() kills the workers and
    returns, with nothing left blocked (``multiprocessing.Pool.terminate()`` hung here, its
    task thread stuck sending a chunk to the workers it had killed)."""
    import signal
    import threading
    import time

    from electra.data.text import Chunk

    tok_json = load_tokenizer(str(corpus[1])).to_str()
    # 16 distinct 1 MB lines (pickle would send one line repeated only once), made before the
    # clock starts: on a loaded machine making them outlasted the 50 ms, and the signal came
    # before pytest.raises was entered
    lines = [f"{j} " + "word " * 200_000 for j in range(16)]
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = prep._Workers(2, tok_json, {})
    main_thread = threading.main_thread().ident
    timer = threading.Timer(0.05, signal.pthread_kill, (main_thread, signal.SIGINT))
    try:
        with pytest.raises(KeyboardInterrupt):
            timer.start()  # the send below blocks: no worker reads its pipe yet
            for i in range(4):  # 2 a worker: at most what the workers would take
                workers.submit(Chunk(i, lines))
            time.sleep(30)  # (not reached: a 16 MB send outlasts 50 ms)
        sent = workers.sent
        t0 = time.perf_counter()
        workers.close()
        assert time.perf_counter() - t0 < 10
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    assert sent < 4 and not any(p.is_alive() for p in workers.procs)


def test_a_worker_that_dies_or_fails_is_one_line_not_a_hang(corpus):
    """A worker killed (as the kernel's OOM killer does) is a UserError naming the signal and
    the fix; an exception inside a worker's packing is raised in the parent as itself."""
    import os
    import signal

    from electra.data.text import Chunk

    tok_json = load_tokenizer(str(corpus[1])).to_str()
    workers = prep._Workers(2, tok_json, {})  # no settings: packing raises KeyError
    try:
        workers.submit(Chunk(0, ["a b c"]))
        with pytest.raises(KeyError, match="seq_len"):
            workers.next_result()
        os.kill(workers.procs[1].pid, signal.SIGKILL)
        workers.procs[1].join()
        with pytest.raises(UserError, match=r"worker \(--workers 2\) was killed by signal 9, "
                                            r"most likely out of memory .*; run again with fewer"):
            workers.submit(Chunk(1, ["a b c"]))
            workers.next_result()
    finally:
        workers.close()


def test_jsonl_and_gzip_inputs_pack_like_plain_text(corpus, tmp_path):
    text, _ = corpus
    docs = [d.split("\n") for d in text.read_text().strip().split("\n\n")]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in docs))
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(text.read_bytes()))
    run_prepare(corpus, tmp_path / "plain")
    for src, name in ((jsonl, "j"), (gz, "g")):
        run_prepare(corpus, tmp_path / name, inputs=[str(src)])
        assert (tmp_path / name / "train/ids.bin").read_bytes() == (
            tmp_path / "plain/train/ids.bin").read_bytes()


def test_long_line_is_cut_into_pieces_not_lost(corpus, tmp_path):
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["aaa"] * 500) + "\n")
    meta = run_prepare(corpus, tmp_path / "out", inputs=[str(long)])
    assert meta["long_lines_cut"] == 1
    ds = ShardDataset(tmp_path / "out")
    n_kept = int(ds.segments[:, 1].sum()) - 2 * len(ds) - int(
        (ds.segments[:, 1] > ds.segments[:, 0]).sum())
    assert n_kept + meta["tokens_dropped"] == meta["tokens_in"]


def test_loader_resumes_mid_epoch_at_the_same_example(corpus, tmp_path):
    run_prepare(corpus, tmp_path / "out")
    ds = ShardDataset(tmp_path / "out")
    a = BatchLoader(ds, batch_size=4, seed=3)
    n_steps = len(ds) // 4 + 5  # runs into the second epoch
    first = [next(a)["input_ids"] for _ in range(7)]
    state = a.state_dict()
    rest = [next(a)["input_ids"] for _ in range(n_steps)]
    b = BatchLoader(ds, batch_size=4, seed=0)
    b.load_state_dict(json.loads(json.dumps(state)))
    for x in rest:
        assert np.array_equal(next(b)["input_ids"], x)
    assert not np.array_equal(first[0], rest[0])


def test_prefetching_hands_out_the_same_batches_and_positions(corpus, tmp_path):
    # One batch ahead in a thread: the batches and, after each, the position a checkpoint
    # saves are the plain loader's; loading a position mid-way forgets the batch read ahead.
    # (Pinning, for a GPU, needs a CUDA runtime; the GPU kit's steps run it.)
    pin = torch.cuda.is_available()
    run_prepare(corpus, tmp_path / "out")
    ds = ShardDataset(tmp_path / "out")
    plain, ahead = BatchLoader(ds, batch_size=4, seed=3), Prefetched(
        BatchLoader(ds, batch_size=4, seed=3), pin=pin)
    n_steps = len(ds) // 4 + 5  # into the second epoch
    for _ in range(n_steps):
        a, b = next(plain), next(ahead)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert ahead.state_dict() == plain.state_dict()
    back = BatchLoader(ds, batch_size=4, seed=3)
    saved = ahead.state_dict()
    expected = [next(ahead)["input_ids"] for _ in range(3)]
    ahead.load_state_dict(saved)
    back.load_state_dict(saved)
    for x in expected:
        assert torch.equal(next(ahead)["input_ids"], x)
        assert torch.equal(next(back)["input_ids"], x)


def test_ranks_read_disjoint_slices_of_the_global_batch(corpus, tmp_path):
    run_prepare(corpus, tmp_path / "out")
    ds = ShardDataset(tmp_path / "out")
    one = BatchLoader(ds, batch_size=6, seed=1)
    ranks = [BatchLoader(ds, batch_size=3, seed=1, rank=r, world_size=2) for r in range(2)]
    for _ in range(4):
        whole = next(one)["input_ids"]
        parts = [next(r)["input_ids"] for r in ranks]
        assert np.array_equal(np.concatenate(parts), whole)


def test_changed_tokenizer_is_detected(corpus, tmp_path):
    text, tok_dir = corpus
    run_prepare(corpus, tmp_path / "out")
    ds = ShardDataset(tmp_path / "out")
    same = load_tokenizer(tok_dir)
    ds.check_tokenizer(tokenizer_checksum(same), same.get_vocab_size())
    other = train_tokenizer([str(text)], vocab_size=100, out=tmp_path / "tok2", lowercase=False)
    with pytest.raises(UserError, match="vocabulary of"):
        ds.check_tokenizer(tokenizer_checksum(same), same.get_vocab_size() + 7)
    with pytest.raises(UserError, match="another tokenizer"):
        ds.check_tokenizer(tokenizer_checksum(other), same.get_vocab_size())


def test_interrupted_run_leaves_nothing_loadable_and_keeps_old_output(corpus, tmp_path,
                                                                      monkeypatch):
    out = tmp_path / "out"
    run_prepare(corpus, out)
    before = (out / "train/ids.bin").read_bytes()
    calls = {"n": 0}
    real = prep._Writer.write

    def dying(self, ids, seg):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real(self, ids, seg)

    monkeypatch.setattr(prep._Writer, "write", dying)
    with pytest.raises(KeyboardInterrupt):
        run_prepare(corpus, out, overwrite=True, seed=5)
    assert (out / "train/ids.bin").read_bytes() == before  # the old output is intact
    with pytest.raises(UserError, match="interrupted"):
        ShardDataset(tmp_path / "out.partial")


def cli(*args: str) -> int:
    return main(list(args))


def test_bad_input_gives_one_line_and_exit_2(corpus, tmp_path, capsys):
    text, tok = corpus
    base = ["prepare", "--tokenizer", str(tok), "--out", str(tmp_path / "o")]
    cases = [
        (["--input", str(tmp_path / "missing.txt")], "no such file"),
        (["--input", str(tmp_path / "*.nothing")], "matches no file"),
        (["--input", str(text), "--seq-len", "4"], "--seq-len 4"),
        (["--input", str(text), "--seq-len", "16384"], "--seq-len 16384"),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    cases.append((["--input", str(empty)], "no text found"))
    for extra, words in cases:
        assert cli(*base, *extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, err
    # A vocabulary without [MASK].
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n")
    assert cli("prepare", "--input", str(text), "--tokenizer", str(vocab), "--out",
               str(tmp_path / "o")) == 2
    assert "[MASK]" in capsys.readouterr().err
    # An output folder with files electra did not write is refused, --overwrite or not.
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    for more in ([], ["--overwrite"]):
        assert cli("prepare", "--input", str(text), "--tokenizer", str(tok), "--out",
                   str(tmp_path / "busy"), *more) == 2
        assert "holds files electra did not write" in capsys.readouterr().err
        assert [p.name for p in (tmp_path / "busy").iterdir()] == ["keep.txt"]
        assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"


def test_bytes_that_are_not_utf8_are_replaced_and_counted(corpus, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"aaa bbb \xff\xfe ccc\n\nddd \xc3 eee\n")
    meta = run_prepare(corpus, tmp_path / "out", inputs=[str(bad)])
    assert meta["bad_bytes_replaced"] == 3
    assert meta["splits"]["train"]["examples"] == 2


def test_tokenizer_cli_trains_and_refuses_existing_folder(corpus, tmp_path, capsys):
    text, _ = corpus
    out = tmp_path / "tok"
    assert cli("tokenizer", "train", "--input", str(text), "--vocab-size", "90",
               "--out", str(out), "--cased") == 0
    assert (out / "vocab.txt").is_file() and (out / "tokenizer.json").is_file()
    assert cli("tokenizer", "train", "--input", str(text), "--out", str(out)) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_case_of_a_bare_vocab_is_what_lowercasing_would_change(tmp_path):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "witness", "##es"]
    (tmp_path / "uncased.txt").write_text("\n".join([*words, "ℝ"]) + "\n", encoding="utf-8")
    (tmp_path / "cased.txt").write_text("\n".join([*words, "The"]) + "\n", encoding="utf-8")
    # 'ℝ' is upper case with no lower case: lowercasing cannot have made it, nor removed it.
    assert load_tokenizer(tmp_path / "uncased.txt").encode("The Witnesses").tokens == [
        "[CLS]", "the", "witness", "##es", "[SEP]"]
    assert load_tokenizer(tmp_path / "cased.txt").encode("The Witnesses").tokens == [
        "[CLS]", "The", "[UNK]", "[SEP]"]
    # A transformers tokenizer_config.json beside it says the case.
    for name, lower, tokens in (("uncased", False, ["[UNK]", "[UNK]"]),
                                ("cased", True, ["the", "witness", "##es"])):
        (tmp_path / name).mkdir()
        shutil.copy(tmp_path / f"{name}.txt", tmp_path / name / "vocab.txt")
        (tmp_path / name / "tokenizer_config.json").write_text(json.dumps(
            {"do_lower_case": lower, "tokenizer_class": "ElectraTokenizer"}))
        for given in (tmp_path / name, tmp_path / name / "vocab.txt"):
            assert load_tokenizer(given).encode("The Witnesses").tokens[1:-1] == tokens


def test_bert_uncased_vocab_tokenizes_as_transformers_does():
    """bert-base-uncased's vocab.txt alone gives transformers' ElectraTokenizerFast's ids
    (lowercased, accents stripped; it holds 'ℝ'), on real mixed-case pairs."""
    import tempfile

    from helpers import shared_data

    transformers = pytest.importorskip("transformers")
    from electra.tasks.sequence.data import glue_task, read_glue

    vocab, mrpc = shared_data("vocab/bert-base-uncased-vocab.txt"), shared_data("glue/MRPC")
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(vocab, Path(folder) / "vocab.txt")
        theirs = transformers.ElectraTokenizerFast.from_pretrained(folder)
    ours = load_tokenizer(vocab)
    pairs = [(e.text_a, e.text_b) for e in read_glue(glue_task("mrpc"), mrpc, "dev")][:200]
    pairs.append(("Café Ünder the ℝ-line", "NAÏVE Résumé"))
    assert [e.ids for e in ours.encode_batch(pairs)] == [
        theirs(a, b)["input_ids"] for a, b in pairs]
    assert sum(e.ids.count(100) for e in ours.encode_batch(pairs)) < 20  # [UNK] is rare


def test_real_corpus_with_bert_vocab_round_trips(tmp_path):
    from helpers import shared_data

    text = shared_data("corpus/heldout/news.txt")
    vocab = shared_data("vocab/bert-base-uncased-vocab.txt")
    meta = prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(vocab), out=str(
        tmp_path / "out"), seq_len=128, quiet=True))
    assert meta["special_tokens"] == {"pad": 0, "unk": 100, "cls": 101, "sep": 102,
                                      "mask": 103}
    ds = ShardDataset(tmp_path / "out")
    tok = load_tokenizer(vocab)
    lines = [x for x in text.read_text(encoding="utf-8").split("\n") if x.strip()]
    stream = "," + ",".join(str(t) for e in tok.encode_batch(lines, add_special_tokens=False)
                             for t in e.ids) + ","
    for i in range(0, len(ds), max(1, len(ds) // 25)):
        end_a, n = int(ds.segments[i, 0]), int(ds.segments[i, 1])
        # Each segment is a contiguous run of the corpus's tokens, in order.
        for lo, hi in ((1, end_a - 1), (end_a, n - 1)):
            if hi > lo:
                run = "," + ",".join(str(int(t)) for t in ds.ids[i, lo:hi]) + ","
                assert run in stream
