"""The seams hold: a new objective and a new task head are each one class and one registry
line, and every command picks them up (toys defined here, as a plug-in would be)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SPECIAL, make_batch, tiny_config
from tokenizers import Tokenizer, models

from electra.config import FinetuneConfig
from electra.errors import UserError
from electra.evaluation.base import Evaluator
from electra.objectives import registry as objectives
from electra.objectives.base import (
    ElectraOutput,
    Objective,
    Step,
    corrupt_with,
    detect,
    finish,
    generate,
)
from electra.objectives.config import ObjectiveConfig
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Batch, Draws
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.tasks import registry as heads
from electra.tasks.base import TaskData
from electra.tasks.sequence.head import Sequence, SequenceClassifier


class HalfLambda(Objective):
    """A toy: ELECTRA with the discriminator's loss at half its weight."""

    name = "half_lambda"
    summary = "ELECTRA at λ/2"

    def forward(self, model, step: Step) -> ElectraOutput:
        gen, sampled = generate(model, step)
        corrupted, labels = corrupt_with(step, sampled)
        disc, disc_logits = detect(model, step, corrupted, labels)
        loss = gen.loss + step.cfg.disc_weight / 2 * disc.loss
        return finish(step, loss, {"gen_loss": gen, "disc_loss": disc}, corrupted, labels,
                      disc_logits)


@pytest.fixture
def registered(request):
    """Register a toy for one test (``registered(registry_module, part)``), then remove it."""

    def add(module, part):
        module.register(part)  # the one line a plug-in adds
        table = module.HEADS if hasattr(module, "HEADS") else module.OBJECTIVES
        assert table[part.name] is part
        request.addfinalizer(lambda: table.remove(part.name))
        return part

    return add


def test_a_new_objective_is_one_class_and_one_registry_line(registered):
    registered(objectives, HalfLambda())
    cfg = ObjectiveConfig(kind="half_lambda")  # config validation knows it
    model_cfg = tiny_config()
    ids, mask, types = make_batch([20, 13], 20)

    def losses(kind: str) -> ElectraOutput:
        torch.manual_seed(0)
        model = ElectraPretrainingModel(model_cfg, ObjectiveConfig(kind=kind), SPECIAL)
        return model(Batch(ids, mask, types), Draws(rng=torch.Generator().manual_seed(1)))

    toy, electra = losses("half_lambda"), losses("electra")
    assert toy.gen_loss == electra.gen_loss and toy.disc_loss == electra.disc_loss
    torch.testing.assert_close(toy.loss, electra.gen_loss + 25 * electra.disc_loss)
    assert set(toy.counts) == set(electra.counts)  # the shared steps' statistics
    assert step_flops_per_sequence(model_cfg, cfg, 20) == step_flops_per_sequence(
        model_cfg, ObjectiveConfig(), 20)  # the traits count its FLOPs


class ParityClassifier(SequenceClassifier):
    """The toy's own module: only its head builds it."""


class Parity(Sequence):
    """A toy head: is a text's number of words even? Its data is made, not read."""

    name = "parity"
    tasks = ("parity",)

    def load(self, task: str, **given) -> TaskData:
        texts = [" ".join(["a"] * n) for n in range(1, 41)]
        examples = [self.example(t) for t in texts]
        return TaskData("parity", examples, {"dev": examples[:10]}, ("accuracy",), False,
                        {"even": 0, "odd": 1}, head=self)

    @staticmethod
    def example(text: str):
        from electra.data.examples import Example

        return Example(text, None, "even" if len(text.split()) % 2 == 0 else "odd")

    def meta(self, data: TaskData) -> dict:
        return {"head": self.name}

    def build(self, cfg, labels, regression, kernels=None, settings=None):
        return ParityClassifier(cfg, len(labels), kernels)


def test_a_new_head_is_one_class_and_one_registry_line(registered, tmp_path):
    from electra.commands.finetune import ModelSource, load_classifier, run_finetune
    from electra.data.tokenizer import save_tokenizer
    from electra.tasks.registry import load_task

    registered(heads, Parity())
    data = load_task("parity")  # the registry finds the head that reads the task
    assert isinstance(data.head, Parity)
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2, "[CLS]": 3, "[SEP]": 4,
                                      "[MASK]": 5}, unk_token="[UNK]"))
    save_tokenizer(tok, tmp_path / "tok")
    source = ModelSource(None, tiny_config(vocab_size=6), tmp_path / "tok", "random-init")
    cfg = FinetuneConfig(lr=1e-3, epochs=1, batch_size=8, precision="fp32", max_length=48)
    results = run_finetune(source, data, tmp_path / "ft", cfg, [1])
    assert set(results["seeds"][1]["dev"]) == {"accuracy"}
    model, meta = load_classifier(tmp_path / "ft/seed-1")  # the folder names its head
    assert meta["head"] == "parity" and meta["labels"] == {"even": 0, "odd": 1}
    assert type(model) is ParityClassifier  # rebuilt by the toy head, not a fallback
    assert Path(tmp_path / "ft/results.md").is_file()


def test_a_taken_name_is_refused_and_the_registries_are_read_when_used(registered):
    """A second part under a taken name is refused (it silently replaced the first); a head
    registered after the export module was imported has its export table and class."""
    from electra.saved import hf_format

    with pytest.raises(ValueError, match="'electra' is already registered"):
        objectives.register(HalfLambda.__new__(type("Twin", (HalfLambda,), {"name": "electra"})))
    with pytest.raises(ValueError, match="'sequence' is already registered"):
        heads.register(Parity.__new__(type("Twin", (Parity,), {"name": "sequence"})))
    assert type(objectives.OBJECTIVES["electra"]).__name__ == "Electra"

    class Exported(Parity):
        name, tasks, hf_part, hf_class = "exported", ("exported",), "exported", "HFExported"
        hf_keys = (("toy.weight", "hf_toy.weight"),)

    registered(heads, Exported())
    from electra.model.bodies.bert.hf import key_table

    assert hf_format.export_of(tiny_config()).cls("exported") == "HFExported"
    assert ("toy.weight", "hf_toy.weight") in key_table("exported", hf_format.task_of("exported"))


def test_a_new_family_is_one_file_and_one_registry_line(registered, tmp_path, capsys):
    """A family that subclasses no head (tests/toy_family.py: its own reader, defaults,
    setting, module, scores and export mapping): registered in one line, `finetune` trains it
    with its defaults and its own setting (checked as every setting, refused for another
    family's task), `evaluate` and `predict` read its folder, `export` writes transformers'
    class."""
    import json

    import toy_family
    from safetensors.torch import load_file

    import electra
    from electra.cli import main
    from electra.commands.finetuned import load_classifier
    from electra.data.tokenizer import save_tokenizer

    registered(heads, toy_family.WordCount())  # the one line
    for name, n in (("train.txt", 64), ("dev.txt", 16)):
        (tmp_path / name).write_text("".join(" ".join(["a"] * (1 + i % 7)) + "\n"
                                             for i in range(n)))
    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 2, "[CLS]": 3, "[SEP]": 4,
                                      "[MASK]": 5}, unk_token="[UNK]"))
    save_tokenizer(tok, tmp_path / "tok")
    run = ["finetune", "--random-init", "tiny", "--tokenizer", str(tmp_path / "tok"),
           "--task", "wordcount", "--train", str(tmp_path / "train.txt"), "--dev",
           str(tmp_path / "dev.txt"), "--set", "precision=fp32", "--set", "lr=1e-3",
           "--out", str(tmp_path / "ft"), "--quiet"]
    capsys.readouterr()
    assert main([*run, "--set", "per=0"]) == 2  # its range, as every setting's
    assert "per must be a positive integer, got 0" in capsys.readouterr().err
    assert main([*run[:6], "sst2", "--data", str(tmp_path), *run[11:], "--set", "per=2"]) == 2
    assert "--set per: a setting of the wordcount task family" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists()
    assert main([*run, "--set", "per=2"]) == 0
    results = json.loads((tmp_path / "ft/results.json").read_text())
    assert results["config"]["max_length"] == 32 and results["config"]["epochs"] == 2
    assert results["config"]["per"] == 2 and "doc_stride" not in results["config"]
    saved = json.loads((tmp_path / "ft/seed-1/config.json").read_text())["finetune"]
    assert saved["per"] == 2  # read back by evaluate and predict
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "ft/seed-1"), "--task", "wordcount",
                 "--dev", str(tmp_path / "dev.txt")]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored == results["seeds"]["1"]  # the folder rebuilt by the toy's own head
    records = electra.predict(tmp_path / "ft/seed-1", tmp_path / "dev.txt")
    assert len(records) == 16 and all(set(r) == {"count"} for r in records)
    assert main(["export", str(tmp_path / "ft/seed-1"), "--out", str(tmp_path / "hf")]) == 0
    exported = load_file(tmp_path / "hf/model.safetensors")
    assert {"classifier.dense.weight", "classifier.out_proj.bias"} <= set(exported)
    config = json.loads((tmp_path / "hf/config.json").read_text())
    assert config["architectures"] == ["ElectraForSequenceClassification"]
    assert config["problem_type"] == "regression"
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf")
    ours, _ = load_classifier(tmp_path / "ft/seed-1")
    ids, mask, types = make_batch([9, 5], 9, vocab_size=6)
    with torch.no_grad():
        torch.testing.assert_close(hf.eval()(input_ids=ids, attention_mask=mask,
                                             token_type_ids=types).logits,
                                   ours.eval()(ids, mask, types), atol=1e-5, rtol=0)


class Norms(Evaluator):
    """A toy evaluation: the mean norm of a text file's lines' embeddings, unnormalised."""

    name = "norms"
    primary_metric = "mean_norm"
    help = "norms: a toy, the mean norm of --data FILE's lines' embeddings"
    spec_keys = frozenset({"data"})

    def check(self) -> None:
        if not self.data:
            raise UserError("--task norms reads --data FILE")

    def __call__(self, model, pooling=None, batch_size=32, precision="fp32", device="auto",
                 progress=False):
        from electra.evaluation.encoder import Encoder

        texts = Path(self.data).read_text().splitlines()
        v = Encoder(model, pooling, normalize=False, precision=precision,
                    device=device).encode(texts, batch_size)
        return {"mean_norm": float(np.linalg.norm(v, axis=1).mean()), "texts": len(texts)}


def test_a_new_evaluation_is_one_class_and_one_registry_line(request, tmp_path, capsys):
    """A toy evaluation registered in one line: `evaluate --task` runs it (its early check
    and --help know it), `compare --tasks` takes it as a zero-shot task whose evaluator and
    primary metric are the toy's."""
    import json

    from helpers import make_run

    from electra.cli import build_parser, main
    from electra.evaluation.base import EVALUATORS, register
    from electra.experiments.compare_spec import parse_tasks

    register(Norms)  # the one line
    request.addfinalizer(lambda: EVALUATORS.remove("norms"))
    run, _ = make_run(tmp_path, "tiny")
    (tmp_path / "t.txt").write_text("a b c\nd e\nf\n")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(run), "--task", "norms", "--data",
                 str(tmp_path / "t.txt"), "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got == Norms(data=tmp_path / "t.txt")(run) and got["texts"] == 3
    assert main(["evaluate", "--model", str(run), "--task", "norms"]) == 2
    assert "--task norms reads --data FILE" in capsys.readouterr().err
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["evaluate"]
    assert "norms: a toy" in str(next(a.help for a in sub._actions if a.dest == "task"))
    (task,) = parse_tasks(f"norms:data={tmp_path / 't.txt'}", glue=None)
    assert task.zero_shot and task.metric == "mean_norm"
    ev = task.evaluation()
    assert isinstance(ev, Norms) and ev.primary(ev(run)) == got["mean_norm"]


class Seeded:
    """A toy source: rows made from a seed (``toy:seed=N``), a letters corpus of that seed
    prepared where the source is opened (as a plug-in would read a generator or a
    database)."""

    def __init__(self, path: str, root: Path) -> None:
        self.path, self.root = path, root

    def open(self, split: str, words: bool):
        from helpers import write_corpus

        from electra.data.loader import ShardDataset
        from electra.data.prepare import PrepareOptions, prepare
        from electra.data.tokenizer import train_tokenizer

        folder = self.root / self.path.replace(":", "-").replace("=", "-")
        if not (folder / "data/meta.json").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            write_corpus(folder / "c.txt", n_docs=60, seed=int(self.path.partition("=")[2]))
            train_tokenizer([str(folder / "c.txt")], 120, folder / "tok")
            prepare(PrepareOptions(inputs=[str(folder / "c.txt")], tokenizer=str(
                folder / "tok"), out=str(folder / "data"), seq_len=32, val_fraction=0.2,
                quiet=True))
        return ShardDataset(folder / "data", split, word_starts=words)


def test_a_new_source_is_one_class_and_one_registry_line(tmp_path, request, capsys):
    """A toy source registered in one line trains through `pretrain --data toy:seed=N`, alone
    and in a mixture with a prepared folder; the early checks and the outputs rule take its
    path as a source's, not a missing local one."""
    import json

    from electra.cli import main
    from electra.data import sources

    sources.register("toy", lambda path, tc: Seeded(path, tmp_path / "made"))  # the one line
    request.addfinalizer(lambda: sources.KINDS.pop("toy"))
    with pytest.raises(ValueError, match="'toy' is already taken"):
        sources.register("toy", Seeded)
    with pytest.raises(ValueError, match="'s3' is already taken"):
        sources.register("s3", Seeded)
    assert isinstance(sources.source("toy:seed=3"), Seeded)
    assert not sources.missing("toy:seed=3") and sources.missing(str(tmp_path / "none"))
    tiny = ["--preset", "tiny", "--quiet", "--set", "model.num_layers=1", "--set",
            "model.hidden_size=32", "--set", "model.num_heads=2", "--set",
            "model.intermediate_size=64", "--set", "model.embedding_size=32", "--set",
            "train.batch_size=8", "--set", "train.precision=fp32", "--set",
            "train.max_steps=3", "--set", "train.log_every=1", "--set", "train.eval_every=3"]
    assert main(["pretrain", "--data", "toy:seed=3", "--out", str(tmp_path / "run"), *tiny]) == 0
    lines = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3] and "val_disc_loss" in lines[-1]
    assert (tmp_path / "run/discriminator/model.safetensors").is_file()
    folder = tmp_path / "made/toy-seed-3/data"  # a mixture of the toy and a prepared folder
    assert main(["pretrain", "--data", f"toy:seed=3:0.5+{folder}:0.5", "--out",
                 str(tmp_path / "mix"), *tiny]) == 0
    last = json.loads((tmp_path / "mix/metrics.jsonl").read_text().splitlines()[-1])
    assert {"tokens_from_toy:seed=3", "tokens_from_data"} <= set(last)
