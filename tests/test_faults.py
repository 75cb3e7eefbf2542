"""The fault matrix: bad input to every command ends in one line naming the problem, exit 2,
and every file that was there before is byte-identical after (and nothing new appears).

One world of fixtures is built once (a tokenizer, prepared data, a pretraining run with
checkpoints, a fine-tuned model, a transformers export, and damaged or malicious copies of
each); every case runs `electra ...` in-process against it.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SHARED_DATA, sha, snapshot, write_corpus, write_sentiment

from electra.cli import main


class Payload:
    """Unpickling this runs code (creates a file): what weights_only=True must refuse."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def malicious_pickle(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps({"optimizer": Payload(marker)}, protocol=2))


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def cli(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[Path]:
    w = tmp_path_factory.mktemp("world")
    write_corpus(w / "c.txt", n_docs=60)
    assert cli("tokenizer", "train", "--input", w / "c.txt", "--vocab-size", 120,
               "--out", w / "tok") == 0
    assert cli("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len", 32,
               "--val-fraction", 0.2, "--out", w / "data") == 0
    (w / "tiny.toml").write_text(
        'preset = "tiny"\n[model]\nhidden_size = 32\nembedding_size = 32\nnum_layers = 2\n'
        'num_heads = 2\nintermediate_size = 64\nmax_position_embeddings = 64\n'
        '[train]\nbatch_size = 8\nmax_steps = 4\nwarmup_steps = 1\nsave_every = 2\n'
        'eval_every = 2\neval_batches = 1\nlog_every = 1\nprecision = "fp32"\n')
    assert cli("pretrain", "--config", w / "tiny.toml", "--data", w / "data", "--out",
               w / "run", "--quiet") == 0
    write_sentiment(w / "train.csv", 64, 0)
    write_sentiment(w / "dev.csv", 16, 1)
    assert cli("finetune", "--model", w / "run", "--task", "custom", "--train",
               w / "train.csv", "--dev", w / "dev.csv", "--out", w / "ft", "--quiet",
               "--set", "epochs=1", "--set", "batch_size=8", "--set", "max_length=32") == 0
    assert cli("export", w / "run", "--out", w / "hf") == 0

    # Damaged data folders, and data from before word boundaries were stored.
    for name in ("meta_cut", "meta_lies", "ids_cut", "seg_cut", "ids_big", "old_data"):
        shutil.copytree(w / "data", w / name)
    old = json.loads((w / "old_data/meta.json").read_text())
    del old["word_starts"]
    (w / "old_data/meta.json").write_text(json.dumps(old))
    truncate(w / "meta_cut/meta.json")
    meta = json.loads((w / "data/meta.json").read_text())
    (w / "meta_lies/meta.json").write_text(json.dumps({**meta, "vocab_size": 40}))
    truncate(w / "ids_cut/train/ids.bin", 0.9)
    truncate(w / "seg_cut/train/segments.bin", 0.9)
    ids = bytearray((w / "ids_big/train/ids.bin").read_bytes())
    ids[2:4] = (5000).to_bytes(2, "little")  # the first example's second token: id 5000
    (w / "ids_big/train/ids.bin").write_bytes(bytes(ids))
    # Damaged model folders (a run's discriminator/) and a fine-tuned model.
    for name in ("run_cfg_cut", "run_w_cut", "run_sizes"):
        shutil.copytree(w / "run", w / name, ignore=shutil.ignore_patterns("checkpoints"))
    truncate(w / "run_cfg_cut/discriminator/config.json")
    truncate(w / "run_w_cut/discriminator/model.safetensors")
    cfg = json.loads((w / "run/discriminator/config.json").read_text())
    cfg["model"]["hidden_size"] = 64
    (w / "run_sizes/discriminator/config.json").write_text(json.dumps(cfg))
    shutil.copytree(w / "ft/seed-1", w / "ft_w_cut")
    truncate(w / "ft_w_cut/model.safetensors")
    # A run whose latest checkpoint holds a malicious state.pt (with a matching manifest),
    # and one whose checkpoint was copied in from another run (other settings); the first
    # killed after its last checkpoint, before its models were written (what --resume of a
    # finished run would refuse before reading a checkpoint).
    for name in ("run_evil", "run_foreign"):
        shutil.copytree(w / "run", w / name)
    for part in ("discriminator", "generator"):
        shutil.rmtree(w / "run_evil" / part)
    ck = w / "run_evil/checkpoints/step-0000004"
    malicious_pickle(ck / "state.pt", w / "PWNED")
    manifest = json.loads((ck / "manifest.json").read_text())
    manifest["state.pt"] = {"bytes": (ck / "state.pt").stat().st_size,
                            "sha256": sha(ck / "state.pt")}
    (ck / "manifest.json").write_text(json.dumps(manifest))
    ck = w / "run_foreign/checkpoints/step-0000004"
    saved = json.loads((ck / "config.json").read_text())
    saved["train"]["lr"] = 0.5
    (ck / "config.json").write_text(json.dumps(saved))
    manifest = json.loads((ck / "manifest.json").read_text())
    manifest["config.json"] = {"bytes": (ck / "config.json").stat().st_size,
                               "sha256": sha(ck / "config.json")}
    (ck / "manifest.json").write_text(json.dumps(manifest))
    # transformers folders: cut config, cut weights, sizes that disagree, a malicious .bin.
    for name in ("hf_cfg_cut", "hf_w_cut", "hf_sizes", "hf_evil"):
        shutil.copytree(w / "hf/discriminator", w / name)
    truncate(w / "hf_cfg_cut/config.json")
    truncate(w / "hf_w_cut/model.safetensors")
    hcfg = json.loads((w / "hf/discriminator/config.json").read_text())
    (w / "hf_sizes/config.json").write_text(json.dumps({**hcfg, "intermediate_size": 99}))
    (w / "hf_evil/model.safetensors").unlink()
    malicious_pickle(w / "hf_evil/pytorch_model.bin", w / "PWNED")
    # Another tokenizer of the same size (a different vocabulary).
    write_corpus(w / "other.txt", n_docs=60, seed=7)
    assert cli("tokenizer", "train", "--input", w / "other.txt", "--vocab-size", 120,
               "--cased", "--out", w / "tok2") == 0
    assert cli("prepare", "--input", w / "other.txt", "--tokenizer", w / "tok2", "--seq-len",
               32, "--out", w / "data2") == 0
    # Task files.
    (w / "latin1.csv").write_bytes("text,label\ncaf\xe9 good,pos\nbad film,neg\n".encode(
        "latin-1"))
    (w / "short.csv").write_text("text,label\ngood film,pos\nbad film\nok,neg\n")
    (w / "one_class.csv").write_text("text,label\ngood,pos\ngreat,pos\nlovely,pos\n")
    (w / "unseen.csv").write_text("text,label\ngood,pos\nbad,meh\n")
    (w / "bad.jsonl").write_text('{"text": "good", "label": "pos"}\n{"text": oops}\n')
    (w / "num.csv").write_text("text,label\ngood,high\nbad,0.1\n")
    (w / "nan.csv").write_text("text,label\ngood,0.5\nbad,nan\n")
    # Tagging files: good ones, ragged columns, a dev tag never seen in training, a JSONL
    # sentence whose tags do not match its tokens, a CoNLL-U line with 9 columns.
    (w / "tags.conll").write_text("alice\tB-PER\nruns\tO\n\nbob\tB-PER\nsees\tO\n")
    (w / "ragged.conll").write_text("alice\tB-PER\nruns\tO\tX\n")
    (w / "unseen.conll").write_text("alice\tB-LOC\nruns\tO\n")
    (w / "short.jsonl").write_text('{"tokens": ["a", "b"], "tags": ["O"]}\n')
    (w / "blank_tag.jsonl").write_text('{"tokens": ["a", "b"], "tags": ["O", " "]}\n')
    (w / "nine.conllu").write_text("1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\n")
    # SQuAD files: an answerable question without an answer; JSON that is not SQuAD.
    (w / "noans.json").write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
        "paragraphs": [{"context": "a b", "qas": [{"id": "q9", "question": "a?",
                                                   "answers": []}]}]}]}))
    (w / "notsquad.json").write_text('{"rows": []}')
    (w / "nocol.csv").write_text("sentence,label\ngood film,pos\n")
    # Configs.
    (w / "broken.toml").write_text("[train\nlr = 1\n")
    (w / "types.toml").write_text('preset = "tiny"\n[train]\nlr = "fast"\n')
    (w / "section.toml").write_text('preset = "tiny"\n[trian]\nlr = 1e-3\n')
    (w / "table.toml").write_text('preset = "tiny"\nmodel = 5\n')
    (w / "preset.toml").write_text('preset = "huge"\n')
    (w / "kind.toml").write_text('preset = "tiny"\n[objective]\nkind = "mlm"\n')
    (w / "gdes.toml").write_text('preset = "tiny"\n[objective]\nsharing = "gdes"\n')
    # A comparison folder of other settings (its compare.json).
    (w / "cmp_other").mkdir()
    (w / "cmp_other/compare.json").write_text(json.dumps(
        {"budget": "1e9", "budget_flops": 1e9, "spec": {"pretraining": {"budget_flops": 5e9}}}))
    # Metrics with a damaged line in the middle; a file where a folder belongs.
    shutil.copytree(w / "run", w / "run_metrics", ignore=shutil.ignore_patterns(
        "checkpoints", "tb"))
    lines = (w / "run_metrics/metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:10]
    (w / "run_metrics/metrics.jsonl").write_text("\n".join(lines) + "\n")
    (w / "a_file").write_text("not a folder")
    # Table inputs (issue 17): Parquet without the text field, not Parquet at all, a datasets
    # folder with train/test splits; a tokenizer with no mask token.
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a b", "c"], "n": [1, 2]}), w / "body.parquet")
    (w / "fake.parquet").write_text("text,label\n")
    (w / "dsdict/train").mkdir(parents=True)
    (w / "dsdict/dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    shutil.copytree(w / "dsdict/train", w / "dsdict/test")
    for split in ("train", "test"):  # the layout datasets.save_to_disk writes
        (w / "dsdict" / split / "state.json").write_text(json.dumps(
            {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": None}))
        (w / "dsdict" / split / "dataset_info.json").write_text("{}")
        with pa.OSFile(str(w / "dsdict" / split / "data-00000-of-00001.arrow"), "wb") as f, \
                pa.ipc.new_stream(f, pa.schema([("text", pa.string())])) as writer:
            writer.write_table(pa.table({"text": ["a b c", "d e"]}))
    tok = json.loads((w / "tok/tokenizer.json").read_text())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != "[MASK]"]
    tok["model"]["vocab"]["[MAS]"] = tok["model"]["vocab"].pop("[MASK]")
    (w / "nomask.json").write_text(json.dumps(tok))
    (w / "badcase").mkdir()  # a vocab.txt whose transformers settings beside it are torn
    shutil.copy(w / "tok/vocab.txt", w / "badcase/vocab.txt")
    (w / "badcase/tokenizer_config.json").write_text('{"do_lower_case": tr')
    add_issue_23_fixtures(w)
    add_issue_39_fixtures(w)
    add_issue_58_fixtures(w)
    # issue 42: rows of ModernBERT's 8,192 tokens (short documents: mostly padding)
    assert cli("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len", 8192,
               "--out", w / "data8k") == 0
    # packed rows (issue 43: a body that cannot keep their sequences apart refuses them)
    assert cli("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len", 32,
               "--pack", "--out", w / "packed") == 0
    # packed rows whose first example's start bit is gone
    assert cli("prepare", "--input", w / "c.txt", "--tokenizer", w / "tok", "--seq-len", 32,
               "--pack", "--out", w / "packed_cut") == 0
    starts = w / "packed_cut/train/sequences.bin"
    starts.write_bytes(bytes([0]) + starts.read_bytes()[1:])
    # issue 69: files whose columns a task would not read in full; a BEIR folder with one
    # document twice
    (w / "scored.tsv").write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a} b\t{a} c\t{k}\n" for k, a in enumerate("abcdefgh")))
    (w / "two_texts.csv").write_text("text,text_b,label\n" + "".join(
        f"{a},{a} b,{k % 2}\n" for k, a in enumerate("abcdefgh")))
    (w / "beir_twice/qrels").mkdir(parents=True)
    (w / "beir_twice/corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n' * 2)
    (w / "beir_twice/queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (w / "beir_twice/qrels/test.tsv").write_text("q\td\ts\nq1\td1\t1\n")
    # issue 72: reranking files (groups; scored pairs; a positive without negatives) and a
    # BEIR folder whose qrels name a document the corpus lacks
    (w / "groups.jsonl").write_text("".join(
        f'{{"query": "{a}", "positive": "{a} b", "negative_1": "c d"}}\n' for a in "abcd"))
    (w / "pairs.tsv").write_text("query\tdocument\tlabel\n" + "".join(
        f"{a}\t{a} b\t{3 * (k % 2)}\n" for k, a in enumerate("abcd")))
    (w / "lonely.jsonl").write_text('{"query": "a", "positive": "a b"}\n')
    (w / "beir_lost/qrels").mkdir(parents=True)
    (w / "beir_lost/corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (w / "beir_lost/queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (w / "beir_lost/qrels/test.tsv").write_text("q\td\ts\nq1\td9\t1\n")
    (w / "beir_ok/qrels").mkdir(parents=True)
    (w / "beir_ok/corpus.jsonl").write_text('{"_id": "d1", "text": "a b"}\n'
                                            '{"_id": "d2", "text": "a c"}\n')
    (w / "beir_ok/queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (w / "beir_ok/qrels/test.tsv").write_text("q\td\ts\nq1\td1\t1\n")
    holder = hold_lock(w / "locked")  # another process writing --out locked
    yield w
    holder.kill()
    holder.wait()


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than any recursion limit


def hold_lock(out: Path) -> subprocess.Popen:
    """A process holding OUT's lock as a running electra command would (until killed)."""
    code = ("import sys, time; from electra.io.outputs import take_lock; "
            "take_lock(__import__('pathlib').Path(sys.argv[1]), 'pretrain'); "
            "print('held', flush=True); time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def add_issue_23_fixtures(w: Path) -> None:
    """Inputs for the data-loss and reader cases: a corpus folder, deeply nested JSON in
    every file we read, labels with empty cells, SQuAD files with holes, symbolic links."""
    (w / "corpus_dir").mkdir()
    shutil.copy(w / "c.txt", w / "corpus_dir" / "c.txt")
    for name, where in (("run_deep", "discriminator/config.json"), ("data_deep", "meta.json"),
                        ("tok_deep", "special_tokens_map.json")):
        src = {"run_deep": "run", "data_deep": "data", "tok_deep": "tok"}[name]
        shutil.copytree(w / src, w / name, ignore=shutil.ignore_patterns("checkpoints"))
        (w / name / where).write_text(DEEP)
    (w / "cmp_deep").mkdir()
    (w / "cmp_deep/compare.json").write_text(DEEP)
    (w / "deep.json").write_text(DEEP)
    (w / "deep.jsonl").write_text('{"text": "good", "label": "pos"}\n' + DEEP + "\n")
    (w / "binary.toml").write_bytes(bytes(range(256)))
    (w / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (w / "empty_label.csv").write_text("text,label\ngood film,pos\nbad film,\nok,neg\n")
    para = {"context": "a b", "qas": [{"id": "q1", "question": "a?",
                                       "answers": [{"text": "a", "answer_start": 0}]}]}
    (w / "noqas.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [para, {"context": "c d"}]}]}))
    (w / "one_article.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [para]}]}))
    # SuperGLUE folders with one flaw each (the rest as distributed).
    sg = Path(__file__).parent / "fixtures" / "superglue"
    for name, folder, line, change in (
            ("sg_nopassage", "BoolQ", 1, lambda r: r.pop("passage")),
            ("sg_nochoice", "COPA", 2, lambda r: r.pop("choice2")),
            ("sg_noplaceholder", "ReCoRD", 0,
             lambda r: r["qas"][0].update(query="no slot here"))):
        shutil.copytree(sg / folder, w / name)
        rows = (w / name / "train.jsonl").read_text().splitlines()
        row = json.loads(rows[line])
        change(row)
        rows[line] = json.dumps(row)
        (w / name / "train.jsonl").write_text("\n".join(rows) + "\n")
    shutil.copytree(sg / "AX-b", w / "sg_axb")
    (w / "link_out").symlink_to(w / "tok")
    (w / "lnk.partial").symlink_to(w / "tok")
    shutil.copytree(w / "data", w / "unfinished.partial")  # as a killed prepare leaves it
    (w / "foreign.partial").mkdir()
    (w / "foreign.partial" / "mine.txt").write_text("a user's file")
    assert cli("import", w / "hf/discriminator", "--out", w / "imp") == 0


def add_issue_39_fixtures(w: Path) -> None:
    """Inputs for round 2: a user's file where a lock goes, labels with a control character,
    grouping ids missing or given twice, SuperGLUE in latin-1, COPA fields of other types,
    SQuAD files with no usable question or a repeated id, a checkpoint whose zip is damaged
    under a matching manifest, a run's config.json with a key electra never writes."""
    (w / "ft39.electra-lock").write_text("a user's notes")
    shutil.copy(w / "train.csv", w / "ft40.electra-lock")  # an input where the lock goes
    (w / "latin1.conll").write_bytes("caf\xe9\tO\n".encode("latin-1"))
    (w / "bell.csv").write_text("text,label\ngood,1\nbad,1\x07\nok,0\n")
    (w / "tags.csv").write_text("text,label\ngood,pos\n")
    (w / "twice.csv").write_text("text,label,label\ngood,pos,neg\nbad,neg,pos\n")
    sg = Path(__file__).parent / "fixtures" / "superglue"
    for name, folder, split, change in (
            ("sg_noidx", "ReCoRD", "val", lambda rows: [q.pop("idx") for r in rows
                                                       for q in r["qas"]]),
            ("sg_twice", "MultiRC", "val", lambda rows: rows[1].update(idx=rows[0]["idx"])),
            ("sg_qlist", "COPA", "train", lambda rows: rows[0].update(question=["cause"])),
            ("sg_qdict", "COPA", "train", lambda rows: rows[0].update(question={"a": 1})),
            ("sg_premise", "COPA", "train", lambda rows: rows[0].update(premise=[1, 2]))):
        shutil.copytree(sg / folder, w / name)
        path = w / name / f"{split}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        change(rows)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copytree(sg / "BoolQ", w / "sg_latin1")
    (w / "sg_latin1/train.jsonl").write_bytes(
        '{"question": "caf\xe9?", "passage": "p", "label": true, "idx": 0}\n'.encode("latin-1"))
    para = {"context": "a b c", "qas": [{"id": "q1", "question": "a?", "answers": [
        {"text": "zzz", "answer_start": 0}]}]}
    (w / "outside.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [para]}]}))
    (w / "nocontext.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [{**para, "context": ""}]}]}))
    good = {"context": "a b c", "qas": [{"id": "q1", "question": "a?", "answers": [
        {"text": "a", "answer_start": 0}]}]}
    (w / "twice.json").write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [good, good]}]}))
    shutil.copytree(w / "run", w / "run_zip")  # damaged inside, checksums updated to match
    for part in ("discriminator", "generator"):  # (killed before its models were written)
        shutil.rmtree(w / "run_zip" / part)
    ck = w / "run_zip/checkpoints/step-0000004"
    data = (ck / "state.pt").read_bytes()[:-200]  # the zip's central directory cut off
    (ck / "state.pt").write_bytes(data)
    manifest = json.loads((ck / "manifest.json").read_text())
    manifest["state.pt"] = {"bytes": len(data), "sha256": sha(ck / "state.pt")}
    (ck / "manifest.json").write_text(json.dumps(manifest))
    shutil.copytree(w / "run", w / "run_cut", ignore=shutil.ignore_patterns(
        "discriminator", "generator"))  # as an interrupted run leaves it
    shutil.copytree(w / "ft/seed-1", w / "mt/seed-1/custom")  # a multi-task seed's layout
    shutil.copytree(w / "run", w / "run_class", ignore=shutil.ignore_patterns("checkpoints"))
    saved = json.loads((w / "run_class/config.json").read_text())
    (w / "run_class/config.json").write_text(json.dumps({**saved, "__class__": "os.system"}))


def add_issue_58_fixtures(w: Path) -> None:
    """Round 3: transformers folders of a ModernBERT discriminator and a DeBERTa generator
    (random weights, the world's vocabulary), exported as electra writes them."""
    import torch

    from electra.data.tokenizer import load_tokenizer
    from electra.model.bodies import model_preset
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.saved import folders

    tok = load_tokenizer(w / "tok")
    for body in ("modernbert", "deberta"):
        torch.manual_seed(0)
        model = ElectraPretrainingModel(model_preset(
            "tiny", body=body, vocab_size=tok.get_vocab_size(), hidden_size=32,
            embedding_size=32, num_heads=2, intermediate_size=64, num_layers=2,
            generator_size=1.0, generator_layers=1))
        for kind in ("discriminator", "generator"):
            folders.save(getattr(model, kind), kind, w / f"{body}_run" / kind, tok)
        assert cli("export", w / f"{body}_run", "--out", w / f"{body}_hf") == 0


def P(*args):  # a path inside the world, resolved when the case runs
    return ("@", *args)


PRETRAIN = ("pretrain", "--config", P("tiny.toml"), "--data", P("data"), "--quiet")


def ft(model: str = "run", train: str = "train.csv", dev: str = "dev.csv") -> tuple:
    return ("finetune", "--model", P(model), "--task", "custom", "--train", P(train), "--dev",
            P(dev), "--quiet", "--set", "max_length=32")


FINETUNE = ft()
COMPARE = ("compare", "--data", P("data"), "--config", P("tiny.toml"), "--budget", "1e9",
           "--tasks", "custom:name=s:train={w}/train.csv:dev={w}/dev.csv", "--seeds", "1")
TAGGING = ("finetune", "--model", P("run"), "--task", "tagging", "--train", P("tags.conll"),
           "--quiet")
RANDOM_FT = ("finetune", "--random-init", "tiny", "--tokenizer", P("tok"), "--task", "custom",
             "--dev", P("dev.csv"), "--quiet")

# (category, arguments, words the one line must contain). "--out" is added where it is missing.
CASES = [
    # -- config values: pretraining --
    ("config", (*PRETRAIN, "--set", "train.lr=-1"), "train.lr must be > 0, got -1.0"),
    ("config", (*PRETRAIN, "--set", "train.lr=nan"), "train.lr must be a finite number"),
    ("config", (*PRETRAIN, "--set", "train.adam_beta1=5"), "train.adam_beta1 (5.0)"),
    ("config", (*PRETRAIN, "--set", "train.adam_eps=-1"), "train.adam_eps must be > 0"),
    ("config", (*PRETRAIN, "--set", "train.weight_decay=-0.1"),
     "train.weight_decay must be >= 0, got -0.1"),
    ("config", (*PRETRAIN, "--set", "train.threads=-1"),
     "train.threads must be in [0, 4096], got -1"),
    ("config", (*PRETRAIN, "--set", "train.seed=-1"),
     "train.seed must be in [0, 4294967295], got -1"),
    ("config", (*PRETRAIN, "--set", "model.layer_norm_eps=-1"), "model.layer_norm_eps"),
    ("config", (*PRETRAIN, "--set", "objective.temperature=inf"),
     "objective.temperature must be a finite number"),
    ("config", (*PRETRAIN, "--set", "train.precision=fp8"),
     "train.precision must be one of auto, bf16, fp16, fp32, got 'fp8'"),
    ("config", (*PRETRAIN, "--set", "train.batch_size=0"), "train.batch_size must be a positive"),
    ("config", (*PRETRAIN, "--set", "train.max_steps=abc"),
     "train.max_steps must be an integer, got 'abc'"),
    ("config", (*PRETRAIN, "--set", "train.parallel=zero"),
     "train.parallel must be one of ddp, fsdp"),
    # -- issue 44: schedules --
    ("config", (*PRETRAIN, "--set", "train.schedule=step"),
     "train.schedule must be one of linear, cosine, wsd, got 'step'"),
    ("config", (*PRETRAIN, "--set", "train.schedule=wsd", "--set", "train.decay_fraction=0"),
     "train.decay_fraction must be in (0, 1], got 0"),
    ("config", ("pretrain", "--data", P("data"), "--decay-from", P("data"), "--quiet"),
     "not a checkpoint (a folder RUN/checkpoints/step-N holding manifest.json)"),
    ("config", (*PRETRAIN, "--decay-from", P("data")),
     "takes the run's settings and weights from the checkpoint: drop --preset, --config"),
    ("config", (*PRETRAIN, "--set", "train.decay_steps=-1"), "train.decay_steps must be"),
    ("config", (*PRETRAIN, "--set", "train.max_tokens=-5"), "train.max_tokens must be"),
    ("config", (*PRETRAIN, "--set", "train.decay_shape=exp"),
     "train.decay_shape must be one of linear, 1-sqrt, got 'exp'"),
    ("config", (*PRETRAIN, "--set", "train.decay_shape=1-sqrt"),
     "train.decay_shape=1-sqrt shapes a wsd decay; set train.schedule=wsd"),
    # -- issue 44: trackers --
    ("config", (*PRETRAIN, "--set", "train.log_to=tensorboard,neptune"),
     "train.log_to=tensorboard,neptune: unknown tracker 'neptune'; choose any of "
     "tensorboard, mlflow, wandb"),
    ("config", (*PRETRAIN, "--set", "train.log_to=mlflow,mlflow"),
     "train.log_to=mlflow,mlflow: a tracker is named twice"),
    ("config", (*FINETUNE, "--set", "log_to=comet"),
     "log_to=comet: unknown tracker 'comet'"),
    ("config", (*PRETRAIN, "--set", "train.batch_warmup=16:1000"),
     "train.batch_warmup=16:1000: the first batch must be a multiple of the micro-batch"),
    ("config", (*PRETRAIN, "--set", "train.batch_warmup=half"),
     "train.batch_warmup=half: give START:TOKENS"),
    ("config", (*PRETRAIN, "--set", "train.phases=32:0.5"),
     "train.phases=32:0.5: the fractions sum to 0.5, not 1"),
    ("config", (*PRETRAIN, "--set", "train.phases=32:half"),
     "train.phases=32:half: '32:half' is not LEN:FRACTION"),
    ("config", (*PRETRAIN, "--set", "train.phases=32:0.5,64:0.5"),
     "train.phases=32:0.5,64:0.5 with --data"),
    ("config", (*PRETRAIN, "--set", "train.phases=32:0.5,64:0.5", "--set",
                "train.max_tokens=1000"), "the phases split steps; give train.max_steps"),
    # -- issue 43: the DeBERTa body --
    ("config", (*PRETRAIN, "--set", "model.body=deberta", "--set",
                "model.pos_att_type=c2p|x2y"), "model.pos_att_type='c2p|x2y': give c2p"),
    ("config", (*PRETRAIN, "--set", "model.body=deberta", "--set",
                "model.position_buckets=7"), "model.position_buckets=7 cannot be placed"),
    ("config", (*PRETRAIN, "--set", "model.body=deberta", "--set",
                "model.position_buckets=512", "--set", "model.max_relative_positions=200"),
     "model.position_buckets=512 cannot be placed on a log scale out to 200 positions"),
    ("data", ("pretrain", "--config", P("tiny.toml"), "--data", P("packed"), "--set",
              "model.body=deberta", "--set", "model.position_buckets=32", "--quiet"),
     "which the deberta body cannot keep apart"),
    ("config", (*PRETRAIN, "--set", "model.generator_layers=99"),
     "model.generator_layers=99 is deeper than the discriminator's"),
    ("config", (*PRETRAIN, "--set", "model.generator_layers=-1"),
     "model.generator_layers must be >= 0, got -1"),
    ("config", (*PRETRAIN, "--set", "model.generator_size=1", "--set",
                "model.generator_layers=1", "--set", "objective.sharing=all"),
     "model.generator_layers=1 makes the generator shallower"),
    # -- issue 44: optimizers --
    ("config", (*PRETRAIN, "--set", "train.optimizer=sgd"),
     "train.optimizer must be one of adamw, stableadamw, lamb, muon, got 'sgd'"),
    ("config", (*FINETUNE, "--set", "optimizer=adafactor"),
     "optimizer must be one of adamw, stableadamw, lamb, muon, got 'adafactor'"),
    ("config", (*PRETRAIN, "--set", "train.optimizer=Muon"),
     "train.optimizer must be one of adamw, stableadamw, lamb, muon, got 'Muon'"),
    ("config", (*PRETRAIN, "--set", "objective.sampling=magic"), "objective.sampling must be"),
    ("config", (*PRETRAIN, "--set", "model.num_heads=3"), "not divisible by model.num_heads=3"),
    ("config", (*PRETRAIN, "--set", "model.hidden_dropout=1.5"), "model.hidden_dropout must be"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob=0"), "objective.mask_prob must be in"),
    ("config", (*PRETRAIN, "--set", "nope=1"), "--set nope: no section has that key"),
    ("config", (*PRETRAIN, "--set", "objective.kind=bert"),
     "objective.kind must be one of electra, mlm, random, electra15, replace_mlm, "
     "all_tokens_mlm, fast_electra, got 'bert'"),
    ("config", (*PRETRAIN, "--set", "objective.sharing=some"),
     "objective.sharing must be one of embeddings, none, all, gdes, got 'some'"),
    ("config", (*PRETRAIN, "--set", "objective.unit=sentence"),
     "objective.unit must be one of token, word, span, got 'sentence'"),
    ("config", (*PRETRAIN, "--set", "objective.sharing=all"),
     "the generator must be the same size"),
    ("config", (*PRETRAIN, "--set", "objective.sharing=gdes", "--set",
                "model.share_embeddings=false"), "model.share_embeddings=false turns sharing"),
    ("config", (*PRETRAIN, "--set", "objective.kind=mlm", "--set", "objective.sharing=none"),
     "kind 'mlm' has none"),
    ("config", (*PRETRAIN, "--set", "objective.two_stage_steps=2"),
     "two_stage_steps initialises the discriminator from the generator"),
    ("config", (*PRETRAIN, "--set", "objective.temperature_steps=100"),
     "temperature_end and objective.temperature_steps go together"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=0"),
     "objective.mask_prob_end must be in (0, 1), got 0"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=1.5"),
     "objective.mask_prob_end must be in (0, 1)"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=0.1", "--set",
                "objective.mask_shape=square"), "objective.mask_shape must be one of linear"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=0.1", "--set",
                "objective.mask_over=phase"), "objective.mask_over must be one of run, decay"),
    ("config", (*PRETRAIN, "--set", "objective.mask_over=decay"),
     "set objective.mask_prob_end"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=0.1", "--set",
                "objective.mask_over=decay"), "set train.schedule='wsd'"),
    ("config", (*PRETRAIN, "--set", "objective.mask_prob_end=0.1", "--set",
                "train.phases=32:0.5:0.3,64:0.5:0.15"), "use one of the two"),
    ("config", (*PRETRAIN, "--set", "objective.replacement=zipf"),
     "objective.replacement must be uniform or unigram"),
    ("data", ("pretrain", "--config", P("tiny.toml"), "--data", P("old_data"), "--set",
              "objective.unit=word"), "no word boundaries"),
    ("config", (*PRETRAIN, "--set", "train.lr"), "expected key=value"),
    ("config", ("pretrain", "--config", P("missing.toml"), "--data", P("data")),
     "missing.toml: no such file"),
    ("config", ("pretrain", "--config", P("broken.toml"), "--data", P("data")),
     "broken.toml: not valid TOML"),
    ("config", ("pretrain", "--config", P("types.toml"), "--data", P("data")),
     "train.lr must be a number, got 'fast'"),
    ("config", ("pretrain", "--config", P("section.toml"), "--data", P("data")),
     "unknown config section(s) 'trian'"),
    ("config", ("pretrain", "--config", P("table.toml"), "--data", P("data")),
     "[model] must be a table"),
    ("config", ("pretrain", "--config", P("preset.toml"), "--data", P("data")),
     "unknown preset 'huge'"),
    ("config", ("pretrain", "--data", P("data")), "give --preset NAME"),
    ("config", (*PRETRAIN, "--stop-after", "0"), "--stop-after 0"),
    # -- config values: fine-tuning --
    ("config", (*FINETUNE, "--set", "lr=-1"), "lr must be > 0, got -1.0"),
    ("config", (*FINETUNE, "--set", "lr=nan"), "lr must be a finite number"),
    ("config", (*FINETUNE, "--set", "precision=fp8"), "precision must be one of auto, bf16, fp16"),
    ("config", (*FINETUNE, "--set", "max_length=0"), "max_length must be >= 8, got 0"),
    ("config", (*FINETUNE, "--set", "batch_size=0"), "batch_size must be a positive integer"),
    ("config", (*FINETUNE, "--set", "epochs=abc"), "epochs must be an integer or unset"),
    ("config", (*FINETUNE, "--set", "grad_accum=3"), "not divisible by grad_accum=3"),
    ("config", (*FINETUNE, "--set", "warmup_fraction=2"), "warmup_fraction must be in [0, 1)"),
    ("config", (*FINETUNE, "--set", "lrr=1"), "unknown config key 'lrr'"),
    ("config", (*FINETUNE, "--set", "select=maybe"),
     "select must be one of last, best, got 'maybe'"),
    ("config", (*FINETUNE, "--set", "eval_every=-1"), "eval_every must be >= 0, got -1"),
    ("config", (*FINETUNE, "--set", "threads=-1"), "threads must be in [0, 4096], got -1"),
    ("config", (*FINETUNE, "--set", "group_by_length=maybe"),
     "group_by_length must be true or false (or yes/no, 1/0), got 'maybe'"),
    ("config", (*FINETUNE, "--set", "unpad=maybe"),
     "unpad must be true or false (or yes/no, 1/0), got 'maybe'"),
    ("config", (*FINETUNE, "--set", "compile=2"),
     "compile must be true or false (or yes/no, 1/0), got 2"),
    ("config", (*PRETRAIN, "--set", "train.compile=sometimes"),
     "train.compile must be true or false (or yes/no, 1/0), got 'sometimes'"),
    ("config", (*PRETRAIN, "--set", "train.cuda_graphs=true", "--set", "train.unpad=true"),
     "train.cuda_graphs=true needs static shapes, and train.unpad=true changes them every "
     "batch: set train.unpad=false"),
    ("config", (*PRETRAIN, "--set", "train.cuda_graphs=often"),
     "train.cuda_graphs must be true or false (or yes/no, 1/0), got 'often'"),
    ("config", (*PRETRAIN, "--set", "objective.max_predictions=0"),
     "objective.max_predictions must be a positive integer, got 0 (or leave it unset"),
    ("config", (*FINETUNE, "--seeds", "abc"), "--seeds abc"),
    ("config", (*FINETUNE, "--seeds", "1,1"), "--seeds 1,1"),
    ("config", (*FINETUNE, "--set", "max_length=1024"), "exceeds the model's 64 positions"),
    ("config", ("finetune", "--task", "custom", "--train", P("train.csv"), "--dev",
                P("dev.csv")), "give --model RUN"),
    ("config", ("finetune", "--random-init", "tiny", "--task", "custom", "--train",
                P("train.csv"), "--dev", P("dev.csv")), "needs --tokenizer"),
    ("config", ("finetune", "--model", P("run"), "--task", "squad", "--data", P("data")),
     "--task squad: unknown; valid tasks"),
    ("config", ("tokenizer", "train", "--input", P("c.txt"), "--vocab-size", "10"),
     "--vocab-size 10 is out of range"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--seq-len", "4"),
     "--seq-len 4 is out of range"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--workers", "0"),
     "--workers 0"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--workers",
                "100000"), "--workers 100000 must be from 1 to"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--val-fraction",
                "1.5"), "--val-fraction 1.5"),
    # -- devices --
    ("device", (*PRETRAIN, "--device", "bogus"), "--device bogus: not a device"),
    ("device", (*PRETRAIN, "--device", "cuda"), "--device cuda: this machine has no CUDA"),
    ("device", (*FINETUNE, "--device", "cuda:7"), "--device cuda:7"),
    ("device", (*PRETRAIN, "--set", "train.cuda_graphs=true"),
     "train.cuda_graphs=true: CUDA graphs need a CUDA device and this run is on cpu; run "
     "without it (--set train.cuda_graphs=false)"),
    # -- files read: data folders --
    ("data", ("pretrain", "--preset", "tiny", "--data", P("tok")), "not prepared data"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("meta_cut")),
     "meta_cut/meta.json: not valid JSON"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("meta_lies")),
     "is outside the vocabulary of 40 that meta.json declares"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("ids_cut")),
     "train/ids.bin is missing or not"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("seg_cut")),
     "train/segments.bin is missing or not"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("ids_big")),
     "token id 5000 is outside the vocabulary of"),
    ("data", ("prepare", "--input", P("missing.txt"), "--tokenizer", P("tok")),
     "missing.txt: no such file"),
    ("data", ("prepare", "--input", P("c.txt"), "--tokenizer", P("data/meta.json")),
     "not a tokenizer file"),
    ("data", ("tokenizer", "train", "--input", P("nothing/*.txt")), "matches no file"),
    ("data", ("prepare", "--input", P("c.txt"), "--tokenizer", P("badcase/vocab.txt")),
     "badcase/tokenizer_config.json: not valid JSON (a transformers tokenizer's settings"),
    ("data", ("prepare", "--verify", P("ids_big")), "token id 5000 is outside"),
    ("model", ("detect", "--model", P("run", "generator"), "x"),
     "holds a generator, not a discriminator"),
    ("model", ("detect", "--model", P("hf", "generator"), "x"),
     "not an ELECTRA discriminator"),
    ("model", ("detect", "--model", P("ft", "seed-1"), "x"), "holds a classifier"),
    ("model", ("detect", "--model", P("run_w_cut"), "x"), "model.safetensors: cannot be read"),
    ("config", ("detect", "--model", P("run")), "electra detect needs a text"),
    ("config", ("detect", "--model", P("run"), "x", "--threshold", "1.5"),
     "--threshold 1.5 must be between 0 and 1"),
    ("data", ("detect", "--model", P("run"), "--input", P("latin1.csv")), "not UTF-8 text"),
    ("data", ("detect", "--model", P("run"), "--input", P("bad.jsonl")),
     "bad.jsonl:2: not valid JSON"),
    ("data", ("detect", "--model", P("run"), "--input", P("short.jsonl")),
     'short.jsonl:1: not a JSON object with a "text" field'),
    ("out", ("detect", "--model", P("run"), "x", "--html", P("tok")), "--html {tok} is a folder"),
    ("data", ("prepare", "--input", P("body.parquet"), "--tokenizer", P("tok")),
     "no 'text' field (the fields are body, n); name the text field with --text-field"),
    ("data", ("prepare", "--input", P("body.parquet"), "--tokenizer", P("tok"),
              "--text-field", "n"), "the 'n' field holds int64, not text"),
    ("data", ("prepare", "--input", P("fake.parquet"), "--tokenizer", P("tok")),
     "fake.parquet: cannot be read as Parquet"),
    ("data", ("prepare", "--input", P("dsdict"), "--tokenizer", P("tok"), "--split",
              "validation"), "without the split 'validation'; its splits are train, test"),
    ("data", ("prepare", "--input", P("dsdict", "test"), "--tokenizer", P("tok"), "--split",
              "train"), "a datasets folder of the 'test' split, not 'train'"),
    ("data", ("tokenizer", "train", "--input", P("dsdict"), "--split", "dev"),
     "without the split 'dev'"),
    ("data", ("prepare", "--input", P("c.txt"), "--tokenizer", P("nomask.json")),
     "the tokenizer has no mask token (looked for [MASK], <mask>"),
    ("data", ("prepare", "--input", P("c.txt"), "--tokenizer", P("nomask.json")),
     "name it with --special-tokens mask=TOKEN"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"),
                "--special-tokens", "cls"), "'cls' is not ROLE=TOKEN with ROLE one of"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"),
                "--special-tokens", "bos=[CLS]"), "'bos=[CLS]' is not ROLE=TOKEN"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"),
                "--special-tokens", "mask=<mask>"),
     "the mask token '<mask>' is not in the vocabulary"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"),
                "--special-tokens", "cls=[SEP]"), "roles cls and sep both name '[SEP]'"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--overflow",
                "keep"), "--overflow"),
    ("config", ("tokenizer", "train", "--input", P("c.txt"), "--model", "sentencepiece"),
     "--model"),
    ("data", ("prepare", "--verify", P("seg_cut")), "segments.bin"),
    # -- files read: model folders and checkpoints --
    ("model", ft(model="run_cfg_cut"),
     "run_cfg_cut/discriminator/config.json: not valid JSON"),
    ("model", ft(model="run_w_cut"),
     "run_w_cut/discriminator/model.safetensors: cannot be read"),
    ("model", ft(model="run_sizes"), "do not fit the model"),
    ("model", ft(model="tok"), "no discriminator weights"),
    ("model", ("evaluate", "--model", P("ft_w_cut"), "--task", "custom", "--dev",
               P("dev.csv")), "ft_w_cut/model.safetensors: cannot be read"),
    ("model", ("evaluate", "--model", P("run"), "--task", "custom", "--dev", P("dev.csv")),
     "no classifier weights"),
    ("model", ("evaluate", "--model", P("ft/seed-1"), "--task", "sst2", "--data", P("data")),
     "was fine-tuned on custom, not sst2"),
    ("model", ("export", P("run_w_cut")), "run_w_cut/discriminator/model.safetensors"),
    ("model", ("export", P("run_cfg_cut")), "run_cfg_cut/discriminator/config.json"),
    ("model", ("export", P("ft_w_cut")), "ft_w_cut/model.safetensors: cannot be read"),
    ("model", ("export", P("tok")), "neither a pretraining run"),
    ("model", ("import", P("hf_cfg_cut")), "hf_cfg_cut/config.json: not valid JSON"),
    ("model", ("import", P("hf_w_cut")), "hf_w_cut/model.safetensors: cannot be read"),
    ("model", ("import", P("hf_sizes")), "do not fit the model"),
    ("model", ("import", P("tok")), "no config.json"),
    ("model", ("import", P("hf/discriminator"), "--generator", P("hf/discriminator")),
     "not an ELECTRA generator"),
    ("model", ("pretrain", "--preset", "tiny", "--data", P("data"), "--init", P("tok")),
     "no discriminator weights"),
    ("model", ("pretrain", "--preset", "tiny", "--data", P("data2"), "--init", P("run")),
     "prepared with another tokenizer than --init"),
    ("model", (*PRETRAIN[:-1], "--out", P("run_foreign"), "--resume"),
     "checkpoint step-0000004 was written by another run"),
    ("model", (*PRETRAIN[:-1], "--out", P("run"), "--resume", "--set", "train.lr=0.5"),
     "settings differ from the run being resumed"),
    ("model", (*PRETRAIN[:2], P("tiny.toml"), "--data", P("data2"), "--out", P("run"),
               "--resume"), "prepared with another tokenizer than the run"),
    ("model", ("pretrain", "--preset", "tiny", "--data", P("data2"), "--out", P("o"),
               "--generator", P("run")),
     "prepared with another tokenizer than objective.generator"),
    ("model", ("pretrain", "--preset", "tiny", "--data", P("data"), "--out", P("o"),
               "--generator", P("tok")), "objective.generator"),
    ("model", ("pretrain", "--preset", "tiny", "--data", P("data"), "--out", P("o"),
               "--generator", P("nope")), "nope"),
    ("config", (*PRETRAIN, "--set", "objective.kind=fast_electra"),
     "give it with --generator PATH"),
    ("config", (*PRETRAIN, "--set", "objective.generator=x"),
     "is the frozen generator of kind fast_electra"),
    ("config", (*PRETRAIN, "--set", "objective.generator_precision=bf16"),
     "objective.generator_precision is the frozen generator's"),
    ("config", (*PRETRAIN, "--generator", "x", "--set", "objective.generator_precision=fp8"),
     "objective.generator_precision must be one of fp32, bf16"),
    ("model", ("plot", P("run_metrics")), "line 2 is not valid JSON"),
    ("model", ("plot", P("tok")), "no metrics.jsonl"),
    # -- code in weights files: refused, never run --
    ("pickle", (*PRETRAIN[:-1], "--out", P("run_evil"), "--resume"),
     "state.pt: refused, it holds more than tensors"),
    ("pickle", ("export", P("run_evil/checkpoints/step-0000004")),
     "state.pt: refused, it holds more than tensors"),
    ("pickle", ("import", P("hf_evil")), "pytorch_model.bin: refused, it holds more than"),
    # -- task files --
    ("task", ft(train="latin1.csv"),
     "latin1.csv:2: not UTF-8 text (byte 14"),
    ("task", ft(train="short.csv"), "short.csv: row 2 has no 'label'"),
    ("task", ft(train="one_class.csv"),
     "one_class.csv: every label is 'pos'"),
    ("task", ft(dev="unseen.csv"), "dev labels 'meh' never occur"),
    ("task", ft(train="bad.jsonl"), "bad.jsonl:2: not valid JSON"),
    ("task", (*ft(train="num.csv"), "--regression"),
     "label 'high' is not a finite number"),
    ("task", (*ft(train="nan.csv"), "--regression"), "row 2: label 'nan' is not a finite"),
    ("task", (*FINETUNE, "--label-column", "text"), "--label-column text is also a text "
     "column"),
    ("task", (*RANDOM_FT, "--train", P("missing.csv")), "missing.csv: no such file"),
    ("task", (*FINETUNE, "--text-columns", "sentence"), "no column 'sentence'"),
    ("task", (*FINETUNE, "--predict", "test"), "GLUE submission files"),
    ("task", (*TAGGING, "--dev", P("ragged.conll")),
     "ragged.conll:2: 3 column(s) where the file's first word line has 2"),
    ("task", (*TAGGING, "--dev", P("unseen.conll")), "dev tags 'B-LOC' never occur"),
    ("task", (*TAGGING, "--dev", P("short.jsonl")), "short.jsonl:1: 2 tokens but 1 tags"),
    ("task", (*TAGGING, "--dev", P("blank_tag.jsonl")), "blank_tag.jsonl:1: a tag is empty"),
    ("task", (*TAGGING, "--dev", P("nine.conllu")), "nine.conllu:1: 9 tab-separated columns"),
    ("task", (*TAGGING, "--dev", P("tags.conll"), "--tag-column", "5"),
     "--tag-column 5: {w}/tags.conll has 2 columns"),
    ("task", (*TAGGING, "--dev", P("tags.conll"), "--tag-column", "lemma"),
     "--tag-column lemma: "),
    ("task", TAGGING, "--task tagging needs --train FILE and --dev FILE"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train", P("noans.json"),
              "--dev", P("noans.json")), "question q9 has no answer"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
              P("notsquad.json"), "--dev", P("noans.json")), "not SQuAD JSON"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad2", "--dev", P("noans.json")),
     "--task squad2 needs --train FILE and --dev FILE"),
    ("task", ("predict", "--model", P("ft", "seed-1"), "--input", P("nocol.csv")),
     "no column 'text'; found 'sentence', 'label'"),
    ("data", ("predict", "--model", P("ft", "seed-1"), "--input", P("bad.jsonl")),
     "bad.jsonl:2: not valid JSON"),
    ("data", ("predict", "--model", P("ft", "seed-1"), "--input", P("missing.csv")),
     "missing.csv: no such file"),
    ("model", ("predict", "--model", P("run"), "--input", P("dev.csv")),
     "no classifier weights"),
    ("config", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"),
                "--batch-size", "0"), "--batch-size 0: give a positive number"),
    ("out", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
             P("tok")), "is a folder; give a file path"),
    ("config", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"),
                "--device", "cuda"), "--device cuda: this machine has no CUDA device"
     if not __import__("torch").cuda.is_available() else "--device cuda"),
    ("config", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"),
                "--device", "mps"), "--device mps: electra runs on cpu or cuda"),
    ("config", ("evaluate", "--model", P("ft", "seed-1"), "--task", "custom", "--dev",
                P("dev.csv"), "--device", "gpu"), "--device gpu: not a device"),
    ("config", ("evaluate", "--model", P("run"), "--task", "sts", "--dev", P("dev.csv"),
                "--device", "mps"), "--device mps: electra runs on cpu or cuda"),
    ("config", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
                P("noans.json"), "--dev", P("noans.json"), "--set", "article_split=1.5"),
     "article_split must be in [0, 1)"),
    ("task", (*TAGGING, "--dev", P("latin1.conll")), "latin1.conll:1: not UTF-8 text"),
    # -- outputs --
    ("out", (*PRETRAIN, "--out", P("a_file")), "--out {a_file} is a file, not a folder"),
    ("out", (*PRETRAIN, "--out", P("tok")),
     "holds a tokenizer (electra tokenizer train), not a pretraining run"),
    ("out", (*PRETRAIN, "--out", P("tok"), "--overwrite"), "replaces only its own kind"),
    ("out", (*PRETRAIN, "--out", P("run")), "already holds a pretraining run (electra "
     "pretrain); pass --resume to continue it or --overwrite"),
    ("out", (*PRETRAIN, "--out", "/proc/electra/run"), "cannot write under /proc"),
    ("out", (*FINETUNE, "--out", P("a_file")), "is a file, not a folder"),
    ("out", (*FINETUNE, "--out", P("ft")), "already holds a fine-tuning output"),
    ("out", (*FINETUNE, "--out", P("ft"), "--resume"), "already complete"),
    ("out", (*FINETUNE, "--out", "/proc/electra/ft"), "cannot write under /proc"),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("a_file"),
             "--overwrite"), "is a file, not a folder"),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("data")),
     "already holds prepared data (electra prepare); pass --overwrite"),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out",
             "/proc/electra/data"), "cannot write under /proc"),
    ("out", ("tokenizer", "train", "--input", P("c.txt"), "--out", P("a_file")),
     "is a file, not a folder"),
    ("out", ("tokenizer", "train", "--input", P("c.txt"), "--out", P("tok")),
     "already holds a tokenizer"),
    ("out", ("export", P("run"), "--out", P("hf")), "already holds a transformers export"),
    ("out", ("export", P("run"), "--out", P("a_file"), "--overwrite"), "is a file"),
    ("out", ("import", P("hf/discriminator"), "--out", P("run")),
     "holds a pretraining run (electra pretrain), not an imported run"),
    ("out", ("import", P("hf/discriminator"), "--out", "/proc/electra/imp"),
     "cannot write under /proc"),
    ("out", ("plot", P("run"), "--out", P("tok")), "--out {tok} is a folder"),
    # -- electra compare --
    ("config", (*COMPARE[:6], "1e3", *COMPARE[7:]), "--budget 1e+03 FLOPs is too small"),
    ("config", (*COMPARE[:6], "ten minutes", *COMPARE[7:]), "--budget ten minutes: give"),
    ("config", (*COMPARE, "--objectives", "electra,bert"), "unknown objective 'bert'"),
    ("config", (*COMPARE, "--objectives", "electra,electra"), "give distinct objectives"),
    ("config", (*COMPARE, "--objectives", "electra,electra:mask_prob_end=0.1"),
     "a kind that comes twice names each"),
    ("config", (*COMPARE, "--objectives", "electra:kind=mlm"), "drop kind="),
    ("config", (*COMPARE, "--objectives", "electra:name=a/b"), "a name becomes a folder name"),
    ("config", (*COMPARE, "--objectives", "electra:mask_prob_end=2"),
     "objective.mask_prob_end must be in (0, 1)"),
    ("config", (*COMPARE, "--objectives", "fast_electra"), "give it with --generator PATH"),
    ("model", (*COMPARE, "--objectives", "fast_electra:generator={w}/nope"), "nope"),
    ("config", (*COMPARE, "--tasks", "sst3"), "--tasks sst3: unknown task"),
    ("config", (*COMPARE, "--tasks", "sst2"), "give --glue DIR"),
    ("config", (*COMPARE, "--tasks", "custom:name=s"), "needs train, dev"),
    ("config", (*COMPARE, "--tasks", "mrpc:lrr=1", "--glue", P()), "unknown config key 'lrr'"),
    ("config", (*COMPARE, "--fractions", "0.25,0.5"), "ending with 1"),
    ("config", (*COMPARE, "--finetune-set", "epochs=0"), "epochs must be in [1, 100000], got 0"),
    ("config", (*COMPARE[:4], P("kind.toml"), *COMPARE[5:]), "sets objective.kind = 'mlm'"),
    ("config", (*COMPARE[:4], P("gdes.toml"), *COMPARE[5:], "--objectives", "electra,mlm"),
     "--objectives mlm: the base config does not fit"),
    ("config", (*COMPARE[:5], "--budget", "demo", *COMPARE[7:]), "--budget demo brings"),
    ("data", (*COMPARE[:2], P("ids_cut"), *COMPARE[3:]), "train/ids.bin is missing or not"),
    ("out", (*COMPARE, "--out", P("cmp_other")), "holds a different comparison"),
    ("out", (*COMPARE, "--out", P("tok")), "holds a tokenizer (electra tokenizer train), "
     "not a comparison"),
    ("out", (*COMPARE, "--out", P("a_file")), "is a file, not a folder"),
    # -- issue 23: what a command was given is never replaced, whatever the flags --
    ("loss", ("export", P("run"), "--out", P("run"), "--overwrite"),
     "--out {w}/run is the source {w}/run itself"),
    ("loss", ("export", P("run"), "--out", P("run", "hf"), "--overwrite"),
     "is inside the source {w}/run"),
    ("loss", ("export", P("run", "discriminator"), "--out", P(), "--overwrite"),
     "holds the source {w}/run/discriminator"),
    ("loss", (*FINETUNE, "--out", P("run"), "--overwrite"), "is --model {w}/run itself"),
    ("loss", (*FINETUNE, "--out", P("run_foreign"), "--overwrite"),
     "holds a pretraining run (electra pretrain), not a fine-tuning output"),
    ("loss", (*FINETUNE, "--out", P("data"), "--resume"), "holds prepared data"),
    ("loss", ("tokenizer", "train", "--input", P("c.txt"), "--out", P("data"), "--overwrite"),
     "holds prepared data (electra prepare), not a tokenizer"),
    ("loss", ("tokenizer", "train", "--input", P("corpus_dir"), "--out", P("corpus_dir"),
              "--overwrite"), "is --input {w}/corpus_dir itself"),
    ("loss", ("import", P("hf/discriminator"), "--out", P("hf/discriminator"), "--overwrite"),
     "is the transformers folder {w}/hf/discriminator itself"),
    ("loss", ("import", P("hf/discriminator"), "--out", P("hf"), "--overwrite"),
     "holds the transformers folder"),
    ("loss", ("import", P("hf/discriminator"), "--out", P("run"), "--overwrite"),
     "holds a pretraining run (electra pretrain), not an imported run"),
    ("loss", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
              P("ft", "seed-1", "config.json")), "is inside --model {w}/ft/seed-1"),
    ("loss", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
              P("dev.csv")), "is --input {w}/dev.csv itself"),
    ("loss", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
              P("c.txt")), "exists and was not written by electra predict"),
    ("loss", ("prepare", "--input", P("corpus_dir"), "--tokenizer", P("tok"), "--out",
              P("corpus_dir", "data"), "--overwrite"), "is inside --input {w}/corpus_dir"),
    ("loss", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("tok"),
              "--overwrite"), "is --tokenizer {w}/tok itself"),
    ("loss", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("tok2"),
              "--overwrite"), "holds a tokenizer (electra tokenizer train), not prepared"),
    ("loss", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("run"),
              "--overwrite"), "holds a pretraining run"),
    ("loss", ("plot", P("run"), "--out", P("run", "metrics.jsonl")),
     "is the run {w}/run/metrics.jsonl itself"),
    ("loss", ("plot", P("run"), "--out", P("c.txt")), "not written by electra plot"),
    ("loss", ("plot", P("run"), "--out", P("run", "config.json")),
     "not written by electra plot"),
    ("loss", ("detect", "--model", P("run"), "x", "--html", P("c.txt")),
     "not written by electra detect"),
    ("loss", ("detect", "--model", P("run"), "--input", P("c.txt"), "--html", P("c.txt")),
     "is --input {w}/c.txt itself"),
    ("loss", ("demo", "--out", P("tok")), "holds a tokenizer (electra tokenizer train), not "
     "a demo"),
    ("loss", ("demo", "--out", P("corpus_dir")), "holds files electra did not write"),
    ("loss", (*PRETRAIN, "--out", P("data"), "--resume"), "is --data {w}/data itself"),
    ("loss", (*PRETRAIN, "--out", P("data2"), "--resume"), "holds prepared data"),
    ("loss", (*PRETRAIN, "--out", P("imp"), "--overwrite"),
     "holds an imported run (electra import), not a pretraining run"),
    ("loss", (*PRETRAIN, "--out", P("corpus_dir"), "--overwrite"),
     "holds files electra did not write"),
    ("loss", (*PRETRAIN, "--out", P("data", "run")), "is inside --data {w}/data"),
    ("loss", (*COMPARE, "--out", P("run")), "holds a pretraining run"),
    ("loss", (*COMPARE, "--out", P("data", "cmp")), "is inside --data {w}/data"),
    ("loss", ("demo", "--out", P("data", "demo")), "is inside {w}/data, which holds prepared "
     "data (electra prepare)"),
    ("loss", ("export", P("ft", "seed-1"), "--out", P("ft", "seed-1.hf")),
     "is inside {w}/ft, which holds a fine-tuning output"),
    ("loss", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out",
              P("run", "data")), "is inside {w}/run, which holds a pretraining run"),
    ("loss", ("tokenizer", "train", "--input", P("c.txt"), "--out", P("hf", "tok")),
     "is inside {w}/hf, which holds a transformers export"),
    # -- one writer per --out; links; a staging folder that is not ours --
    ("out", (*PRETRAIN, "--out", P("locked")), "is being written by another electra command "
     "(pid "),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P("locked")),
     "wait for it to end, or choose another folder"),
    ("out", (*FINETUNE, "--out", P("locked")), "is being written by another electra command"),
    ("out", (*FINETUNE, "--out", P("locked"), "--resume"), "is being written by another"),
    ("out", ("export", P("run"), "--out", P("locked")), "is being written by another"),
    ("out", ("import", P("hf/discriminator"), "--out", P("locked")), "is being written by"),
    ("out", ("tokenizer", "train", "--input", P("c.txt"), "--out", P("locked")),
     "is being written by another"),
    ("out", (*COMPARE, "--out", P("locked")), "is being written by another electra command"),
    ("out", ("demo", "--out", P("locked")), "is being written by another electra command"),
    ("out", (*PRETRAIN, "--out", P("link_out")), "--out {w}/link_out is a symbolic link"),
    ("out", (*FINETUNE, "--out", P("link_out"), "--overwrite"), "is a symbolic link"),
    ("out", (*PRETRAIN, "--out", P("lnk")), "{w}/lnk.partial is a symbolic link"),
    ("out", ("export", P("run"), "--out", P("lnk")), "lnk.partial is a symbolic link"),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out",
             P("foreign")), "foreign.partial holds files electra did not write"),
    ("out", (*FINETUNE, "--out", P("unfinished"), "--resume"), "unfinished.partial is the "
     "unfinished output of another command (prepared data (electra prepare))"),
    ("out", (*PRETRAIN, "--out", P("dev.csv", "run")), "dev.csv is a file, not a folder"),
    ("out", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
             P("dev.csv", "p.jsonl")), "dev.csv is a file, not a folder"),
    # -- files read: nesting, size, folders and binaries where files belong --
    ("data", ft(model="run_deep"), "config.json: JSON nested more than 64 levels deep"),
    ("data", ("pretrain", "--preset", "tiny", "--data", P("data_deep")),
     "meta.json: JSON nested more than 64 levels deep"),
    ("data", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok_deep")),
     "special_tokens_map.json: JSON nested more than 64 levels deep"),
    ("data", (*COMPARE, "--out", P("cmp_deep")), "compare.json: JSON nested more than 64"),
    ("data", ("finetune", "--model", P("run"), "--task", "squad1", "--train", P("deep.json"),
              "--dev", P("deep.json")), "deep.json: JSON nested more than 64 levels deep"),
    ("data", ft(train="deep.jsonl"), "deep.jsonl:2: JSON nested more than 64 levels deep"),
    ("data", ("detect", "--model", P("run"), "--input", P("deep.jsonl")),
     "deep.jsonl:2: JSON nested more than 64"),
    ("data", ("tokenizer", "train", "--input", P("deep.jsonl")), "deep.jsonl:2: JSON nested"),
    ("config", ("pretrain", "--config", P("deep.toml"), "--data", P("data")),
     "deep.toml: cannot be read (nested too deeply)"),
    ("config", ("pretrain", "--config", P(), "--data", P("data")),
     "a folder, not a TOML file"),
    ("config", ("pretrain", "--config", P("binary.toml"), "--data", P("data")),
     "binary.toml: not a text file"),
    ("config", (*COMPARE[:4], P("corpus_dir"), *COMPARE[5:]), "a folder, not a TOML file"),
    # -- numbers out of range, booleans --
    ("config", (*PRETRAIN, "--set", f"train.seed={2**70}"), "train.seed must be below 2**53"),
    ("config", (*PRETRAIN, "--set", f"train.seed={2**40}"),
     "train.seed must be in [0, 4294967295]"),
    ("config", (*PRETRAIN, "--set", "model.hidden_size=100000", "--set", "model.num_heads=4"),
     "model.hidden_size=100000 is out of range (at most 65,536)"),
    ("config", (*PRETRAIN, "--set", "model.hidden_size=32768", "--set",
                "model.intermediate_size=131072", "--set", "model.num_layers=64"),
     "more than this machine's"),
    ("config", (*PRETRAIN, "--set", f"model.vocab_size={2**62}"), "model.vocab_size must be"),
    ("config", (*FINETUNE, "--seeds", str(2**40)), "give distinct integers from 0 to 2**32-1"),
    ("config", (*PRETRAIN, "--set", "model.share_embeddings=maybe"),
     "model.share_embeddings must be true or false (or yes/no, 1/0), got 'maybe'"),
    ("config", (*COMPARE[:8], "custom:name=s:train={w}/train.csv:dev={w}/dev.csv:"
                "regression=perhaps", *COMPARE[9:]), "regression must be true or false"),
    ("task", (*COMPARE[:8], "custom:name=s:train={w}/missing.csv:dev={w}/dev.csv",
              *COMPARE[9:]), "missing.csv: no such file"),
    # -- labels, evaluation and SQuAD files --
    ("task", ft(train="empty_label.csv"), "empty_label.csv: row 2: the label ('label') is "
     "empty"),
    ("task", ("evaluate", "--model", P("ft", "seed-1"), "--task", "custom", "--dev",
              P("unseen.csv")), "labels 'meh' never occurred when"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train", P("noqas.json"),
              "--dev", P("noqas.json")), "article 1, paragraph 2: needs a \"context\" string "
     "and a \"qas\" list"),
    # -- probes during pretraining --
    ("config", (*PRETRAIN, "--set", "train.probe_every=2"),
     "train.probe_every needs train.probe_train and train.probe_dev"),
    ("task", (*PRETRAIN, "--set", "train.probe_every=2", "--set",
              "train.probe_train={w}/nope.csv", "--set", "train.probe_dev={w}/dev.csv"),
     "nope.csv: no such file"),
    # -- multi-task --
    ("task", ("finetune", "--model", P("run"), "--task", "custom,nope", "--train",
              "{w}/train.csv,", "--dev", "{w}/dev.csv,"), "--task nope: unknown; valid tasks"),
    ("task", ("finetune", "--model", P("run"), "--task", "custom,custom", "--train",
              "{w}/train.csv,{w}/train.csv", "--dev", "{w}/dev.csv,{w}/dev.csv"),
     "--task: custom is given twice"),
    ("task", ("finetune", "--model", P("run"), "--task", "custom,copa", "--train",
              P("train.csv"), "--dev", "{w}/dev.csv,"), "--train has 1 entry for 2 tasks"),
    ("config", ("finetune", "--model", P("run"), "--task", "custom,boolq", "--train",
                "{w}/train.csv,", "--dev", "{w}/dev.csv,", "--data", ",{w}/sg_nopassage",
                "--set", "task_sampling_alpha=-1"),
     "task_sampling_alpha must be in [0, 100], got -1"),
    # -- SuperGLUE --
    ("task", ("finetune", "--model", P("run"), "--task", "boolq", "--data", P("sg_nopassage")),
     "sg_nopassage/train.jsonl:2: no field 'passage'"),
    ("task", ("finetune", "--model", P("run"), "--task", "copa", "--data", P("sg_nochoice")),
     "sg_nochoice/train.jsonl:3 (COPA has choice1 and choice2): no field 'choice2'"),
    ("task", ("finetune", "--model", P("run"), "--task", "record", "--data",
              P("sg_noplaceholder")), "query 0-0 has no @placeholder"),
    ("task", ("finetune", "--model", P("run"), "--task", "ax-b", "--data", P("sg_axb")),
     "--task ax-b is a diagnostic with no training set"),
    ("task", ("finetune", "--model", P("run"), "--task", "rte", "--data", P("sg_axb")),
     "no such file"),
    ("task", ("evaluate", "--model", P("ft", "seed-1"), "--task", "ax-b", "--data",
              P("sg_axb")), "was fine-tuned on custom, not ax-b"),
    ("config", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
                P("one_article.json"), "--dev", P("one_article.json"), "--set",
                "article_split=0.5", "--set", "max_length=32", "--set", "doc_stride=8"),
     "the file has 1 (by title)"),
    ("config", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
                P("one_article.json"), "--dev", P("one_article.json"), "--set",
                "max_length=32", "--set", "doc_stride=40"),
     "doc_stride=40 must be below max_length=32"),
]


SG = ("finetune", "--model", P("run"), "--quiet", "--task")
LONG = "x" * 300
CASES += [
    # -- issue 61: prepare --engine ray's cluster --
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--engine", "ray",
                "--address", "127.0.0.1:1", "--out", P("ray61")),
     "--engine ray --address 127.0.0.1:1: nothing answers there (Connection refused); start a "
     "cluster there (ray start --head), or leave --address out for a local one"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--engine", "ray",
                "--address", "ray://no-such-host.invalid:10001", "--out", P("ray61")),
     "--engine ray --address ray://no-such-host.invalid:10001: nothing answers there"),
    # -- issue 61: weighted mixtures, a mask rate per phase --
    ("config", ("pretrain", "--config", P("tiny.toml"), "--data", "{w}/data:0.7+{w}/packed",
                "--quiet"), "give every folder of"),
    ("config", ("pretrain", "--config", P("tiny.toml"), "--data", "{w}/data:0+{w}/packed:1",
                "--quiet"), "the weight of {w}/data is 0; give a number from 1e-9 to 1e9"),
    ("data", ("pretrain", "--config", P("tiny.toml"), "--data", "{w}/data+{w}/data2",
              "--quiet"), "data2 was prepared with another tokenizer than {w}/data"),
    ("data", ("pretrain", "--config", P("tiny.toml"), "--data", "{w}/data+{w}/data8k",
              "--quiet"), "holds 8192-token rows and {w}/data 32-token ones; a mixture's "
     "folders hold one length"),
    ("config", (*PRETRAIN, "--set", "train.phases=32:1:1.5"),
     "'32:1:1.5' is not LEN:FRACTION[:MASK]"),
    # -- issue 60: fine-tuning takes the loop settings pretraining has --
    ("config", (*FINETUNE, "--set", "schedule=step"),
     "schedule must be one of linear, cosine, wsd, got 'step'"),
    ("config", (*FINETUNE, "--set", "decay_shape=1-sqrt"),
     "decay_shape=1-sqrt shapes a wsd decay; set schedule=wsd, or leave decay_shape=linear"),
    ("config", (*FINETUNE, "--set", "adam_beta2=1.5"),
     "adam_beta2 must be in [0, 1), got 1.5"),
    ("config", (*FINETUNE, "--set", "schedule=wsd", "--set", "decay_fraction=0"),
     "decay_fraction must be in (0, 1], got 0.0"),
    # -- issue 58: body shapes a run would only find out about later --
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set", "model.num_heads=32"),
     "model: the discriminator's heads are 1 wide (32 / 32 heads); ModernBERT's rotary "
     "positions turn pairs"),
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set", "model.hidden_size=48",
                "--set", "model.embedding_size=48", "--set", "model.num_heads=16"),
     "the discriminator's heads are 3 wide"),
    ("config", (*PRETRAIN, "--set", "model.body=deberta", "--set", "model.embedding_size=16",
                "--set", "model.position_buckets=0"),
     "model.embedding_size=16 differs from model.hidden_size=32: a deberta body's embeddings "
     "are as wide as its blocks"),
    ("config", (*PRETRAIN, "--set", "train.batch_warmup=inf:1000"),
     "train.batch_warmup=inf:1000: give START:TOKENS"),
    ("model", ("import", P("modernbert_hf", "discriminator"), "--generator",
               P("deberta_hf", "generator"), "--out", P("imp58")),
     "deberta_hf/generator holds a deberta body and {w}/modernbert_hf/discriminator a "
     "modernbert one; a run's generator and discriminator share one body: give a modernbert "
     "generator, or none"),
    # -- issue 42: the body and its settings --
    ("config", (*PRETRAIN, "--set", "model.body=gpt"),
     "model.body='gpt' is not a body; choose one of bert, modernbert"),
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set",
                "model.local_attention=7"), "model.local_attention=7 must be an even number"),
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set", "model.global_every=0"),
     "model.global_every must be a positive integer, got 0"),
    ("config", (*PRETRAIN, "--set", "model.global_every=2"),
     "model.global_every=2 is a setting of the modernbert body, but model.body=bert; set "
     "model.body=modernbert to use it, or leave it out"),
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set", "model.local_rope_theta=-1"),
     "model.local_rope_theta must be > 0, got -1.0"),
    ("model", (*PRETRAIN, "--set", "model.body=modernbert", "--init", P("hf/discriminator")),
     "hf/discriminator: holds a bert body but the run asks for model.body=modernbert; --set "
     "model.body=bert to continue it"),
    ("config", (*PRETRAIN, "--set", "model.body=modernbert", "--set", "model.local_attention=64"),
     "model.local_attention=64 is longer than the 32-token rows, so every local layer would "
     "attend to its whole row"),
    ("data", ("pretrain", "--config", P("tiny.toml"), "--data", P("packed_cut"), "--quiet"),
     "train/sequences.bin has rows whose first token begins no example (damaged); prepare "
     "the data again"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--seq-len", "8200"),
     "--seq-len 8200 is out of range; use 8 to 8192"),
    # written-out attention at 8,192 tokens: 4,096 rows keep ~20 TB of probabilities
    ("config", ("pretrain", "--preset", "modernbert-small", "--data", P("data8k"), "--quiet",
                "--set", "model.attention_dropout=0.1", "--set", "train.batch_size=4096"),
     "of attention probabilities (model.attention_dropout=0.1 writes each layer's 8,192 x "
     "8,192 matrix out)"),
    # -- issue 39: a lock is ours or it is not touched --
    ("loss", (*FINETUNE, "--out", P("ft39")), "ft39.electra-lock exists and was not written "
     "by electra (nothing was changed)"),
    ("loss", (*ft(train="ft40.electra-lock"), "--out", P("ft40")), "ft40.electra-lock "
     "exists and was not written by electra"),
    # -- one label rule --
    ("task", ft(train="bell.csv"), "bell.csv: row 2: label ('label') '1\\x07' holds the "
     "control character U+0007; remove it from the file"),
    ("task", (*TAGGING[:6], P("tags.csv"), "--dev", P("tags.csv"), "--quiet"),
     "tags.csv: tagging reads CoNLL-U (.conllu), CoNLL"),
    # -- keys that group or name things --
    ("task", (*SG, "record", "--data", P("sg_noidx")),
     "sg_noidx/val.jsonl:1 query: no field 'idx'; it groups this task's rows"),
    ("task", (*SG, "multirc", "--data", P("sg_twice")),
     "sg_twice/val.jsonl:2: question (passage idx-question idx) 0-0 is given twice (first "
     "on line 1)"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train", P("twice.json"),
              "--dev", P("twice.json")), "question id 'q1' is given twice (first in article "
     "1, paragraph 1)"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
              P("outside.json"), "--dev", P("outside.json")), "no usable question: the "
     "answer of each of its 1 questions is not at its answer_start"),
    ("task", ("finetune", "--model", P("run"), "--task", "squad1", "--train",
              P("nocontext.json"), "--dev", P("nocontext.json")), "paragraph 1: the context "
     "is empty"),
    # -- names that cannot leave --out --
    ("out", (*COMPARE[:8], "custom:name=/tmp/escape:train={w}/train.csv:dev={w}/dev.csv",
             *COMPARE[9:]), "--tasks custom:name='/tmp/escape': a name becomes a folder "
     "name"),
    ("out", (*COMPARE[:8], "custom:name=..:train={w}/train.csv:dev={w}/dev.csv",
             *COMPARE[9:]), "a name becomes a folder name"),
    ("out", (*PRETRAIN, "--out", P(LONG)), "choose a shorter name"),
    ("out", (*FINETUNE, "--out", P(LONG)), "choose a shorter name"),
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out", P(LONG)),
     "choose a shorter name"),
    ("out", ("predict", "--model", P("ft", "seed-1"), "--input", P("dev.csv"), "--out",
             P(LONG)), "choose a shorter name"),
    # -- ranges the run survives --
    ("config", ("finetune", "--model", P("run"), "--task", "custom,boolq", "--train",
                "{w}/train.csv,", "--dev", "{w}/dev.csv,", "--data", ",{w}/sg_nopassage",
                "--set", "task_sampling_alpha=200"),
     "task_sampling_alpha must be in [0, 100], got 200"),
    ("config", (*FINETUNE, "--set", "epoch=1"), "unknown config key 'epoch' in "
     "fine-tuning settings (did you mean 'epochs'?)"),
    ("config", (*PRETRAIN, "--set", "max_step=5"),
     "--set max_step: no section has that key (did you mean 'train.max_steps'?)"),
    ("config", (*PRETRAIN, "--set", "train.probe_epochs=1000000000"),
     "train.probe_epochs must be in [1, 1000], got 1000000000"),
    ("config", (*FINETUNE, "--set", "epochs=1000000000"),
     "epochs must be in [1, 100000], got 1000000000"),
    # -- readers: encodings, field types, damaged files --
    ("task", (*SG, "boolq", "--data", P("sg_latin1")),
     "sg_latin1/train.jsonl:1: not UTF-8 text (byte 17"),
    ("task", (*SG, "copa", "--data", P("sg_qlist")),
     "sg_qlist/train.jsonl:1: question \"['cause']\" is not 'cause' or 'effect'"),
    ("task", (*SG, "copa", "--data", P("sg_qdict")), "is not 'cause' or 'effect'"),
    ("task", (*SG, "copa", "--data", P("sg_premise")),
     "sg_premise/train.jsonl:1: field 'premise' is '[1, 2]', not text"),
    ("model", (*PRETRAIN[:-1], "--out", P("run_zip"), "--resume"),
     "cannot be read although its checksums match"),
    ("model", ("pretrain", "--data", P("data"), "--out", P("run_class"), "--resume"),
     "unknown key(s) '__class__'"),
    ("config", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--seed", "-1"),
     "--seed -1 must be from 0 to 2**32-1"),
    ("task", ft(train="twice.csv"), "twice.csv: the header names 'label' more than once"),
    ("out", (*FINETUNE, "--out", P("ft")), "already holds a fine-tuning output (electra "
     "finetune); pass --overwrite to replace it or choose another folder"),
    # -- what to give as --model instead --
    ("model", ft(model="run_cut"), "the run has no final models yet (it was interrupted, or "
     "still runs): give one of its checkpoints, e.g. {w}/run_cut/checkpoints/step-0000004"),
    ("model", ("evaluate", "--model", P("mt", "seed-1"), "--task", "custom", "--dev",
               P("dev.csv")), "it holds one model per task (a multi-task fine-tune): give "
     "{w}/mt/seed-1/TASK, e.g. {w}/mt/seed-1/custom"),
    # -- issue 62: sts and retrieval on any model's embeddings --
    ("task", ("evaluate", "--model", P("run"), "--task", "sts"), "--task sts reads --data "
     "(GLUE's STS-B folder) or --dev"),
    ("task", ("evaluate", "--model", P("run"), "--task", "sts", "--dev", P("dev.csv")),
     "sentence1"),
    ("task", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data", P("dev.csv")),
     "not a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or a SQuAD .json"),
    ("task", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data", P("data")),
     "no corpus.jsonl; a BEIR folder holds"),
    ("config", ("evaluate", "--model", P("run"), "--task", "sts", "--dev", P("dev.csv"),
                "--text-columns", "text,text", "--pooling", "max"),
     "pooling='max': choose one of mean, cls"),
    ("config", (*FINETUNE, "--set", "temperature=0"), "temperature must be > 0, got 0"),
    ("config", (*FINETUNE, "--set", "temperature=-1"), "temperature must be > 0"),
    ("config", (*FINETUNE, "--set", "pooling=max"), "pooling must be one of mean, cls"),
    ("config", (*FINETUNE, "--set", "learn_temperature=maybe"), "learn_temperature"),
    ("config", (*FINETUNE, "--set", "cached=maybe"), "cached"),
    ("config", (*FINETUNE, "--set", "cached=true"),
     "--set cached: a setting of the embedding task family"),
    ("config", (*PRETRAIN, "--set", "train.cast_once=maybe"), "train.cast_once"),
    ("config", (*PRETRAIN, "--set", "train.shuffle=files"),
     "train.shuffle must be one of rows, blocks, got 'files'"),
    ("config", (*PRETRAIN, "--set", "train.shuffle=blocks", "--set", "train.partitions=3"),
     "train.partitions=3 must divide train.batch_size="),
    ("config", (*PRETRAIN, "--set", "train.partitions=2"),
     "train.partitions=2 parts the blocks of train.shuffle=blocks"),
    ("config", (*PRETRAIN, "--set", "train.shuffle=blocks", "--set", "train.shuffle_block=0"),
     "train.shuffle_block must be a positive integer, got 0"),
    ("config", (*PRETRAIN, "--set", "train.shuffle=blocks", "--set",
                "train.shuffle_block=100000"), "lower train.shuffle_block"),
    ("config", (*FINETUNE, "--set", "doc_stride=64"),
     "--set doc_stride: a setting of the qa and superglue task families, which --task custom "
     "does not read; drop it"),
    ("config", (*FINETUNE, "--set", "family=1"), "unknown config key 'family'"),
    ("config", (*COMPARE, "--finetune-set", "n_best=3"),
     "--set n_best: a setting of the qa task family"),
]

EMBED = ("finetune", "--random-init", "tiny", "--tokenizer", P("tok"), "--task", "embedding",
         "--train", P("scored.tsv"), "--dev", P("scored.tsv"), "--quiet")

CASES += [
    # -- issue 69: environment variables, each through one checked parser, before any work --
    ("env", PRETRAIN, "ELECTRA_CACHE_GB='abc': give a number", {"ELECTRA_CACHE_GB": "abc"}),
    ("env", (*PRETRAIN, "--set", "train.shuffle=blocks"), "ELECTRA_CACHE_GB='nan'",
     {"ELECTRA_CACHE_GB": "nan"}),
    ("env", FINETUNE, "WORLD_SIZE='two': give a whole number", {"WORLD_SIZE": "two"}),
    ("env", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok")),
     "ELECTRA_PROGRESS_SECONDS='0'", {"ELECTRA_PROGRESS_SECONDS": "0"}),
    # -- issue 71: push --
    ("model", ("push", P("nope"), "--repo", "org/x"), "push {w}/nope: no such folder"),
    ("config", ("push", P("run"), "--repo", "org/x@main"), "give the repository as org/name"),
    ("config", ("push", P("run"), "--repo", "org/na..me"), "no hub id"),
    ("config", ("push", P("run"), "--repo", "org/x", "--private"), "add --create"),
    ("model", ("push", P("ft/seed-1"), "--repo", "org/x", "--checkpoints"),
     "holds no checkpoints (RUN/checkpoints/step-N); push without --checkpoints"),
    ("env", ("push", P("run"), "--repo", "org/x"), "push: no hub token; set HF_TOKEN",
     {"HF_TOKEN": "", "HF_HOME": "/nonexistent-electra-hf-home"}),
    # -- issue 69: mixture weights whose sum overflowed; hub ids the hub's rules reject --
    ("config", ("pretrain", "--config", P("tiny.toml"), "--data",
                "{w}/data:1e308+{w}/packed:1e308", "--quiet"), "give a number from 1e-9 to 1e9"),
    ("model", ("detect", "--model", "org/na..me", "a b"),
     "'org/na..me' is no hub id (Cannot have -- or .. in repo_id)"),
    ("model", ("import", "org/name--x"), "'org/name--x' is no hub id"),
    # -- issue 69: store URLs: '..' parts, an output over, inside or around an input --
    ("out", ("prepare", "--input", P("c.txt"), "--tokenizer", P("tok"), "--out",
             "s3://b/X/../../escape"), "a store's URL may not have '..', '.' or empty parts"),
    ("out", ("prepare", "--input", "s3://b/corpus", "--tokenizer", P("tok"), "--out",
             "s3://b/corpus/data"), "--out s3://b/corpus/data is inside --input s3://b/corpus"),
    ("out", ("prepare", "--input", "s3://b/corpus/*.txt", "--tokenizer", P("tok"), "--out",
             "s3://b"), "--out s3://b holds --input s3://b/corpus/*.txt"),
    ("data", ("prepare", "--input", P("data"), "--tokenizer", P("tok")),
     "data is an electra output (its .electra.json), not text"),
    # -- issue 69: a finished run is not resumed (its cards were rewritten empty) --
    ("out", (*PRETRAIN[:-1], "--out", P("run"), "--resume"),
     "is finished (4 of 4 steps, its models written) and nothing was interrupted"),
    # -- issue 69: no column dropped silently; flags a task does not read --
    ("task", EMBED, "scored.tsv: column 'score' would not be read"),
    ("task", (*EMBED, "--regression"), "--regression: --task embedding reads pairs"),
    ("task", (*EMBED, "--label-column", "score"), "--label-column score: --task embedding"),
    ("task", (*EMBED, "--min-score", "9"), "0 row(s) with 0 different document(s)"),
    ("task", (*FINETUNE, "--min-score", "3"), "--min-score: --task custom does not read it"),
    ("task", ("finetune", "--model", P("run"), "--task", "custom", "--train",
              P("two_texts.csv"), "--dev", P("two_texts.csv"), "--quiet"),
     "column 'text_b' would not be read"),
    ("task", ("finetune", "--model", P("run"), "--task", "sst2", "--data", P("."),
              "--label-column", "x", "--quiet"), "--label-column: --task sst2 does not read it"),
    ("task", (*TAGGING, "--min-score", "1"), "--min-score: --task tagging does not read it"),
    ("data", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data",
              P("beir_twice")), "corpus.jsonl:2: document 'd1' is given twice"),
]

RERANK = ("finetune", "--random-init", "tiny", "--tokenizer", P("tok"), "--task", "rerank",
          "--dev", P("groups.jsonl"), "--quiet")

CASES += [
    # -- issue 72: rerankers: their losses, files, and two-stage evaluation --
    ("config", (*RERANK, "--train", P("groups.jsonl"), "--set", "rerank_loss=pairwise"),
     "rerank_loss must be one of auto, listwise, bce, mse, got 'pairwise'"),
    ("task", (*RERANK, "--train", P("pairs.tsv"), "--set", "rerank_loss=listwise"),
     "rerank_loss=listwise ranks a query's positive above its negatives, and the training "
     "file holds scored pairs"),
    ("task", (*RERANK, "--train", P("pairs.tsv"), "--set", "rerank_loss=bce"),
     "rerank_loss=bce reads each pair's target as a probability, and the training file has 3"),
    ("task", (*RERANK, "--train", P("groups.jsonl"), "--set", "rerank_loss=mse"),
     "rerank_loss=mse learns a teacher's scores, and the training groups have none"),
    ("task", (*RERANK, "--train", P("lonely.jsonl")),
     "lonely.jsonl: row 1 has a positive and no negative"),
    ("task", (*RERANK, "--train", P("groups.jsonl"), "--label-column", "x"),
     "--label-column x: {w}/groups.jsonl is read as groups"),
    ("config", ("evaluate", "--model", P("ft", "seed-1"), "--task", "rerank", "--data",
                P("beir_twice"), "--top-k", "0"), "--top-k 0: give how many of the first "
     "stage's documents to rerank, k >= 1"),
    ("config", ("evaluate", "--model", P("run"), "--task", "sts", "--dev", P("dev.csv"),
                "--first-stage", "bm25"), "--first-stage: --task sts does not read it "
     "(--task rerank does); drop it"),
    ("config", ("evaluate", "--model", P("ft", "seed-1"), "--task", "custom", "--dev",
                P("dev.csv"), "--top-k", "5"), "--top-k: --task custom does not read it"),
    ("config", ("evaluate", "--model", P("ft", "seed-1"), "--task", "rerank", "--data",
                P("beir_twice"), "--fusion", "2"), "--fusion 2: give the reranker's weight W "
     "in [0, 1]"),
    ("config", ("evaluate", "--model", P("run"), "--task", "sts", "--dev", P("dev.csv"),
                "--fusion", "0.5"), "--fusion: --task sts does not read it"),
    ("config", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data",
                P("beir_ok"), "--split", "test", "--layer", "1,1"),
     "--layer 1,1: names a state twice; give each once"),
    ("model", ("evaluate", "--model", P("ft", "seed-1"), "--task", "rerank", "--data",
               P("beir_lost"), "--split", "test"), "was fine-tuned on"),
    ("data", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data",
              P("beir_lost")), "qrels/test.tsv:2: document 'd9' is not in corpus.jsonl"),
    ("config", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data",
                P("beir_ok"), "--split", "test", "--layer", "9"), "--layer 9: "),
    ("config", ("export", P("run"), "--out", P("st9"), "--layer", "1"),
     "--layer: chooses the encoder of a sentence-transformers export"),
    ("model", ("export", P("ft", "seed-1"), "--out", P("stg"), "--sentence-transformers",
               "mean", "--generator"), "--generator: {w}/ft/seed-1 holds no generator"),
    ("task", (*COMPARE, "--tasks", "rerank:data={w}/beir_ok"),
     "--tasks rerank: scores a model fine-tuned for it"),
    ("config", ("mine", "--data", P("beir_ok"), "--out", P("m.jsonl"), "--negatives", "0"),
     "--negatives 0: give how many negatives a query to write, 1 or more"),
    ("config", ("mine", "--data", P("beir_ok"), "--out", P("m.jsonl"), "--max-ratio", "2"),
     "--max-ratio 2: give a number in (0, 1]"),
    ("config", ("mine", "--data", P("beir_ok"), "--out", P("m.jsonl"), "--negatives", "1",
                "--margin", "5"), "no query has 1 negative(s) that pass the controls"),
    ("data", ("mine", "--data", P("beir_lost"), "--out", P("m.jsonl")),
     "qrels/test.tsv:2: document 'd9' is not in corpus.jsonl"),
    ("out", ("mine", "--data", P("beir_ok"), "--out", P("dev.csv")),
     "exists and was not written by electra mine"),
    # -- issue 72: Matryoshka dimensions and --truncate-dim --
    ("config", (*EMBED, "--set", "matryoshka_dims=abc"),
     "matryoshka_dims='abc': give positive whole numbers separated by commas"),
    ("config", (*EMBED, "--set", "matryoshka_dims=64,0"), "matryoshka_dims='64,0'"),
    ("config", (*EMBED, "--text-columns", "sentence1,sentence2", "--set",
                "matryoshka_dims=100000"),
     "matryoshka_dims=100000: 100000 is not below the model's"),
    ("config", (*FINETUNE, "--set", "matryoshka_dims=16"),
     "--set matryoshka_dims: a setting of the embedding task family"),
    ("config", ("evaluate", "--model", P("run"), "--task", "retrieval", "--data",
                P("beir_ok"), "--split", "test", "--truncate-dim", "100000"),
     "truncate_dim=100000: the model's embeddings have"),
    ("config", ("evaluate", "--model", P("ft", "seed-1"), "--task", "custom", "--dev",
                P("dev.csv"), "--truncate-dim", "8"), "--truncate-dim: --task custom does "
     "not read it"),
    ("config", ("export", P("run"), "--out", P("st8"), "--truncate-dim", "8"),
     "--truncate-dim 8: cuts the embeddings of a sentence-transformers export"),
    ("config", ("export", P("run"), "--out", P("st0"), "--sentence-transformers", "mean",
                "--truncate-dim", "0"), "--truncate-dim 0: give a positive number"),
    ("config", ("export", P("run"), "--out", P("stw"), "--sentence-transformers", "mean",
                "--truncate-dim", "100000"), "--truncate-dim 100000: its embeddings have"),
    # -- issue 72: `electra pairs`, pairs from raw text --
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--min-ratio", "0.6",
                "--max-ratio", "0.5"), "give 0 < min <= max <= 1"),
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--max-ratio", "1.5"),
     "--max-ratio 1.5"),
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--min-words", "1"),
     "--min-words 1: give 2 or more"),
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--chunk-words", "8"),
     "--chunk-words 8: give at least --min-words 16"),
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--delete", "1"),
     "--delete 1: give a probability in [0, 1)"),
    ("config", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--max-pairs", "0"),
     "--max-pairs 0: give how many pairs to keep"),
    ("data", ("pairs", "--input", P("c.txt"), "--out", P("p.jsonl"), "--min-words", "5000",
              "--chunk-words", "5000"), "no document has --min-words 5000 words"),
    ("data", ("pairs", "--input", P("nowhere.txt"), "--out", P("p.jsonl")), "nowhere.txt"),
    ("out", ("pairs", "--input", P("c.txt"), "--out", P("dev.csv")),
     "exists and was not written by electra pairs"),
]


def resolve(args: tuple, world: Path, case: int) -> list[str]:
    out = []
    for a in args:
        out.append(str(world.joinpath(*a[1:])) if isinstance(a, tuple) else
                   str(a).replace("{w}", str(world)))
    command = out[0] if out[0] != "tokenizer" else "tokenizer train"
    if "--out" not in out and command not in ("plot", "evaluate", "detect", "predict",
                                              "demo", "push") \
            and "--verify" not in out:
        out += ["--out", str(world / f"out-{case}")]
    return out


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(world, capsys, case, monkeypatch):
    _, args, words, *env = CASES[case]
    for name, value in (env[0] if env else {}).items():  # (an "env" case's variables)
        monkeypatch.setenv(name, value)
    argv = resolve(args, world, case)
    words = words.replace("{a_file}", str(world / "a_file")).replace("{tok}", str(
        world / "tok")).replace("{w}", str(world))
    before = snapshot(world)
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (argv, code, err)
    assert err.count("\n") == 0 and err.startswith("electra: error: "), err
    assert words in err, (words, err)
    assert snapshot(world) == before, "files changed"
    assert not (world / "PWNED").exists()
    assert "weights_only" not in err  # never advise loading an untrusted pickle


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_compile_where_torch_cannot_is_one_line_naming_the_fallback(world, capsys, monkeypatch,
                                                                    command):
    from electra import runtime

    monkeypatch.setattr(runtime, "compile_missing", lambda device: "no C++ compiler found")
    args, key = (PRETRAIN, "train.compile") if command == "pretrain" else (FINETUNE, "compile")
    argv = resolve((*args, "--set", f"{key}=true"), world, 1000)
    before = snapshot(world)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"electra: error: {key}=true: no C++ compiler found; run without it "
                   f"(--set {key}=false)"), err
    assert snapshot(world) == before


def test_the_matrix_covers_every_command_and_category():
    commands = {c[1][0] for c in CASES}
    assert commands >= {"tokenizer", "prepare", "pretrain", "finetune", "evaluate", "export",
                        "import", "plot", "push"}
    assert len(CASES) >= 60
    assert {c[0] for c in CASES} == {"config", "device", "data", "model", "pickle", "task",
                                     "out", "loss", "env"}


def test_a_torn_last_metrics_line_is_skipped_and_said(world, capsys):
    run = world / "torn"
    shutil.copytree(world / "run", run, ignore=shutil.ignore_patterns("checkpoints", "tb"))
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 1.')  # a crash mid-write
    assert main(["plot", str(run)]) == 0
    captured = capsys.readouterr()
    assert "skipped its last line" in captured.err
    assert (run / "curves.png").is_file()


def test_glue_readers_refuse_cleanly(world, capsys):
    if not (SHARED_DATA / "glue/RTE").is_dir():
        pytest.skip("../shared/data/glue is absent")
    err = main(["finetune", "--model", str(world / "run"), "--task", "rte", "--data",
                str(world / "tok"), "--out", str(world / "o-glue"), "--quiet"])
    assert err == 2 and "train.tsv: no such file" in capsys.readouterr().err


# -- a full disk: every writer says so in one line, removes its own .partial, keeps what was
# there ------------------------------------------------------------------------------------

def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def safetensors_full(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError("Error while serializing: I/O error: No space left on device "
                          "(os error 28)")


def torch_save_full(*args, **kwargs):  # what torch.save says on a full disk
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


def disk_full(monkeypatch, capsys, argv: list, root: Path, *, kept: Path | None = None,
              words: str = "No space left on device") -> str:
    """Run argv; assert exit 2, one line with ``words``, no .partial under ``root``, and
    ``kept`` (an earlier output) byte-identical."""
    before = snapshot(kept) if kept else None
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()  # warnings of finished work allowed
    assert all(line.startswith("electra: ") for line in lines), lines  # no traceback
    errors = [line for line in lines if line.startswith("electra: error: ")]
    assert len(errors) == 1 and words in errors[0], lines
    err = errors[0]
    assert not [p for p in root.rglob("*.partial") if p.name != "ft.partial"], "a .partial"
    if kept:
        assert snapshot(kept) == before
    monkeypatch.undo()
    return err


def test_disk_full_tokenizer_and_prepare(world, tmp_path, monkeypatch, capsys):
    import electra.data.prepare as prep
    import electra.data.tokenizer as tokmod

    shutil.copytree(world / "tok", tmp_path / "tok")
    monkeypatch.setattr(tokmod, "save_tokenizer", enospc)
    disk_full(monkeypatch, capsys, ["tokenizer", "train", "--input", world / "c.txt", "--out",
                                    tmp_path / "tok", "--overwrite"], tmp_path,
              kept=tmp_path / "tok")
    shutil.copytree(world / "data", tmp_path / "data")
    monkeypatch.setattr(prep._Writer, "write", enospc)
    disk_full(monkeypatch, capsys, ["prepare", "--input", world / "c.txt", "--tokenizer",
                                    world / "tok", "--seq-len", 32, "--out", tmp_path / "data",
                                    "--overwrite"], tmp_path, kept=tmp_path / "data")


@pytest.mark.parametrize("failure", ["oserror", "torch_save", "safetensors"])
def test_disk_full_during_pretraining_keeps_the_last_checkpoint(world, tmp_path, monkeypatch,
                                                                capsys, failure):
    import torch

    import electra.io.checkpoint as ck

    run = tmp_path / "run"
    args = ["pretrain", "--config", world / "tiny.toml", "--data", world / "data", "--out",
            run, "--quiet"]
    assert main([str(a) for a in [*args, "--stop-after", 2]]) == 0
    good = run / "checkpoints/step-0000002"
    if failure == "oserror":
        monkeypatch.setattr(ck, "save_model", enospc)
    elif failure == "torch_save":
        monkeypatch.setattr(torch, "save", torch_save_full)
        Usage = type(shutil.disk_usage(tmp_path))
        monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10 << 30, 10 << 30, 0))
    else:
        monkeypatch.setattr(ck, "save_model", safetensors_full)
    err = disk_full(monkeypatch, capsys, [*args, "--resume"], tmp_path, kept=good)
    assert "step-0000002 is intact" in err and "--resume" in err
    ck.verify_checkpoint(good)
    assert main([str(a) for a in [*args, "--resume"]]) == 0  # with space again, it finishes
    assert (run / "discriminator/model.safetensors").is_file()


def test_disk_full_writing_the_final_folders_then_resume_finishes(world, tmp_path, monkeypatch,
                                                                  capsys):
    import safetensors.torch

    run = tmp_path / "run"
    monkeypatch.setattr(safetensors.torch, "save_file", safetensors_full)
    disk_full(monkeypatch, capsys, ["pretrain", "--config", world / "tiny.toml", "--data",
                                    world / "data", "--out", run, "--quiet"], tmp_path)
    assert not (run / "discriminator").exists()
    assert main(["pretrain", "--config", str(world / "tiny.toml"), "--data",
                 str(world / "data"), "--out", str(run), "--quiet", "--resume"]) == 0
    assert (run / "discriminator/model.safetensors").is_file()


def test_disk_full_during_finetuning_then_resume(world, tmp_path, monkeypatch, capsys):
    import safetensors.torch

    argv = [*resolve(ft(), world, 0)[:-2], "--seeds", "1,2", "--set", "epochs=1", "--set",
            "batch_size=8", "--out", tmp_path / "ft"]
    real, calls = safetensors.torch.save_file, {"n": 0}

    def second_seed_full(*a, **k):
        calls["n"] += 1
        return (safetensors_full if calls["n"] == 2 else real)(*a, **k)

    monkeypatch.setattr(safetensors.torch, "save_file", second_seed_full)
    err = disk_full(monkeypatch, capsys, argv, tmp_path)
    assert "--resume" in err and not (tmp_path / "ft").exists()
    assert (tmp_path / "ft.partial/seed-1/result.json").is_file()
    assert main([str(a) for a in [*argv, "--resume"]]) == 0
    assert json.loads((tmp_path / "ft/results.json").read_text())["seeds"].keys() == {"1", "2"}


def test_disk_full_exporting_importing_plotting(world, tmp_path, monkeypatch, capsys):
    import matplotlib.figure
    import safetensors.torch

    shutil.copytree(world / "hf", tmp_path / "hf")
    monkeypatch.setattr(safetensors.torch, "save_file", safetensors_full)
    disk_full(monkeypatch, capsys, ["export", world / "run", "--out", tmp_path / "hf",
                                    "--overwrite"], tmp_path, kept=tmp_path / "hf")
    shutil.copytree(world / "run", tmp_path / "imp", ignore=shutil.ignore_patterns("*"))
    monkeypatch.setattr(safetensors.torch, "save_file", safetensors_full)
    disk_full(monkeypatch, capsys, ["import", world / "hf/discriminator", "--out",
                                    tmp_path / "imp2"], tmp_path)
    assert not (tmp_path / "imp2").exists()
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", enospc)
    disk_full(monkeypatch, capsys, ["plot", world / "run", "--out", tmp_path / "c.png"],
              tmp_path)


def test_verify_checks_every_row_and_the_checksums(world, tmp_path, capsys):
    from electra.data.loader import ShardDataset

    assert main(["prepare", "--verify", str(world / "data")]) == 0
    out = capsys.readouterr().out
    assert ": ok." in out and "file checksums match" in out
    shutil.copytree(world / "data", tmp_path / "data")
    ids = bytearray((tmp_path / "data/train/ids.bin").read_bytes())
    ids[len(ids) // 2] ^= 0x01  # a token id in the middle turned into its neighbour
    (tmp_path / "data/train/ids.bin").write_bytes(bytes(ids))
    assert len(ShardDataset(tmp_path / "data")) > 0  # still in range: loading accepts it
    assert main(["prepare", "--verify", str(tmp_path / "data")]) == 2
    assert "train/ids.bin does not match its checksum" in capsys.readouterr().err


def test_a_checkpoint_is_a_starting_point_everywhere_a_run_is(world, tmp_path, capsys):
    """An interrupted run's checkpoint, named where its run would be: fine-tuning, detection
    and pretrain --init all read it."""
    ck = world / "run_cut" / "checkpoints" / "step-0000004"
    assert main([*resolve(ft(model="run_cut/checkpoints/step-0000004"), world, 0)[:-2],
                 "--set", "epochs=1", "--out", str(tmp_path / "ft")]) == 0
    assert main(["detect", "--model", str(ck), "a b c"]) == 0
    assert main(["pretrain", "--config", str(world / "tiny.toml"), "--data",
                 str(world / "data"), "--init", str(ck), "--out", str(tmp_path / "run"),
                 "--quiet", "--set", "train.max_steps=1"]) == 0
    assert (tmp_path / "run" / "discriminator" / "model.safetensors").is_file()

