"""The `electra` command line: a table of commands, each parsed and handed to one function.

Every entry of :data:`COMMANDS` names its flags and a ``module:function`` that receives them
as keyword arguments (the flag's ``dest``); the module is imported only when its command runs,
so ``--help`` and data-preparation workers start fast. Problems the user can fix
(:class:`electra.errors.UserError`) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from electra import __version__, catalog, environ, invocation
from electra.config import (
    DEFAULT_TIMEOUT_S,
    FinetuneConfig,
    ModelConfig,
    TrainConfig,
    settings_help,
)
from electra.errors import UserError
from electra.objectives.config import ObjectiveConfig
from electra.train.stop import Stopped, handling  # the standard library's signal module alone


class Later:
    """A help text made when help is shown (from electra/catalog.json, what the registries
    hold: read only then)."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __mod__(self, params: Any) -> str:  # how argparse formats a help text
        return str(self.make()) % params

    def __str__(self) -> str:
        return str(self.make())

    def __contains__(self, text: str) -> bool:
        return text in str(self)

    def __getattr__(self, name: str) -> Any:  # argparse reads it as a str (strip, ...)
        return getattr(str(self), name)


def _tasks() -> str:  # the registries as electra/catalog.json has them (no torch to import)
    return "; ".join(f["help"] for f in catalog.load()["families"].values() if f["help"])


def _family_settings() -> str:
    return str(catalog.load()["family_settings_help"])


def _presets() -> str:
    return ", ".join(catalog.load()["presets"])


def _objectives() -> list[str]:
    return list(catalog.load()["objectives"])


@dataclass(frozen=True)
class Arg:
    flags: tuple[str, ...]
    options: dict[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class OneOf:
    """Flags of which at most one may be given."""

    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Command:
    help: str
    target: str  # "module:function", called with the parsed flags as keyword arguments
    args: tuple[Arg | OneOf, ...] = ()
    description: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    interrupted: str = "nothing was written (--out is as it was); run the command again"
    """What the last line says after Ctrl-C or a signal: how to continue (after the command
    that continues it, when ``continues`` is not None)."""
    continues: tuple[str, ...] | None = None
    """The flags that continue an interrupted run (``()``: the same command again)."""
    check: str | None = None
    """"module:function" run on the parsed flags before ``target`` is imported: the refusals
    that need no torch (electra.commands.checks), answered at once."""


def section_keys() -> str:
    """The keys of each pretraining config section (each documented in electra.config)."""
    from dataclasses import fields

    return "; ".join(f"{c.SECTION}: {', '.join(f.name for f in fields(c))}"
                     for c in (ModelConfig, ObjectiveConfig, TrainConfig))


def _quiet() -> Arg:
    return arg("--quiet", dest="progress", action="store_false", help="no progress bar (off "
               "a terminal: no progress line every ELECTRA_PROGRESS_SECONDS)")


def _device() -> Arg:
    return arg("--device", default="auto", help="auto (cuda if present), cpu, cuda, cuda:1")


def _precision() -> Arg:
    return arg("--precision", choices=["auto", "fp32", "bf16", "fp16"], help="the precision "
               "to run the model at (default: a fine-tuned model's own, whose auto is bf16 "
               "where the device has it; sts and retrieval: fp32); fp32 gives transformers' "
               "fp32 results")


def _dist_timeout() -> Arg:
    return arg("--dist-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
               help="under torchrun: how long a process waits for the others before stopping "
               "with an error (default: %(default)g)")


def _task_args(evaluate: bool = False) -> tuple[Arg, ...]:
    return (
        arg("--task", required=True, help=Later(lambda: _tasks() + (
            "; " + "; ".join(catalog.load()["evaluations"].values()) if evaluate else
            "; several, comma-separated, fine-tune together (multi-task)"))),
        arg("--data", help="the GLUE or SuperGLUE task folder (e.g. glue/SST-2)"
            + ("" if evaluate else "; with several tasks one per task, comma-separated "
               "(empty for tasks read from --train/--dev, which take such lists too)")),
        *(() if evaluate else (arg("--train", help="custom: training file (.csv, .tsv, "
                                   ".jsonl); tagging: .conllu, CoNLL or .jsonl {tokens, tags}"),)),
        arg("--dev", help="custom: dev file" + (" (the file to score)" if evaluate else "")),
        arg("--text-columns", help="custom: A or A,B " + (
            "(default: the columns the model was fine-tuned on)" if evaluate else
            "(default: text); embedding: QUERY,POSITIVE[,NEGATIVE] (default: the first of "
            "anchor,positive[,negative], query,positive[,negative], query,document, "
            "sentence1,sentence2 the file has)") + "; a label, score or text column a file "
            "has beside the ones read is refused unless the columns are named"),
        arg("--label-column", help="custom: the label column (default: label)" + (
            "; sts: the score column (default: label, else score)" if evaluate else
            "; embedding: the score column --min-score reads (default: score, else label)")),
        arg("--regression", action="store_true", help="custom: numeric labels"),
        *(() if evaluate else (arg("--min-score", type=float, metavar="X", help=(
            "embedding: train on the pairs scored at least X alone (their score in "
            "--label-column), e.g. 4 for STS-B's 0-5 scores")),)),
        arg("--tag-column", help="tagging: upos (default) or xpos in CoNLL-U; the tag's "
            "column number in CoNLL (default: the last)"),
    )


INPUT_FORMS = (".txt, .jsonl, .gz, .parquet, .arrow, a datasets.save_to_disk folder, or "
               "hub:NAME to stream a hub dataset")

COMMANDS: dict[str, Command] = {
    "tokenizer train": Command(
        "train a WordPiece, BPE or Unigram tokenizer on raw text; writes tokenizer.json, "
        "vocab.txt and special_tokens_map.json", "electra.data.tokenizer:train_tokenizer", (
            arg("--input", dest="inputs", nargs="+", required=True, metavar="PATH",
                help="text files, directories or globs (" + INPUT_FORMS + ")"),
            arg("--model", default="wordpiece",
                help="wordpiece (BERT's [CLS] [SEP] [PAD] [MASK] [UNK], default), bpe "
                "(byte-level, RoBERTa's <s> </s> <pad> <mask> <unk>) or unigram "
                "(SentencePiece-style, <pad> <unk> [CLS] [SEP] [MASK])"),
            arg("--vocab-size", type=int, default=30522, help="default: 30522"),
            arg("--text-field", default="text", help="the text field of JSONL, Parquet "
                "and Arrow records (default: text)"),
            arg("--split", help="the split of a datasets folder or hub dataset (default: "
                "train)"),
            arg("--out", required=True, help="output folder"),
            OneOf((arg("--lowercase", dest="lowercase", action="store_true", default=True,
                       help="lowercase and strip accents, like bert-base-uncased (default)"),
                   arg("--cased", dest="lowercase", action="store_false",
                       help="keep case and accents"))),
            arg("--overwrite", action="store_true", help="replace an existing tokenizer"))),
    "prepare": Command(
        "tokenize and pack text into memory-mapped shards", "electra.data.prepare:main", (
            arg("--input", dest="inputs", nargs="+", metavar="PATH",
                help="text files, directories or globs (" + INPUT_FORMS + "): one sentence "
                "or paragraph per line, blank line between documents; a record of JSONL, "
                "Parquet or Arrow is a document"),
            arg("--tokenizer", help="a tokenizer folder, tokenizer.json (WordPiece, BPE, "
                "Unigram) or vocab.txt, or a hub id (org/name[@revision])"),
            arg("--special-tokens", metavar="ROLE=TOKEN,...", help="name the tokens of the "
                "roles cls, sep, pad, mask, unk, e.g. cls=<s>,sep=</s>,pad=<pad>,"
                "mask=<mask>,unk=<unk> (default: from the tokenizer)"),
            arg("--overflow", default="drop", help="tokens past "
                "an example's length where it splits: drop them, as the original does "
                "(default), or carry them into the next example"),
            arg("--split", help="the split of a datasets folder or hub dataset (default: "
                "train)"),
            arg("--seq-len", type=int, default=128,
                help="example length, 8 to 8192 (default: 128; the BERT presets take up to "
                     "512, the ModernBERT ones 8192)"),
            arg("--pack", action="store_true", help="fill each row with several examples "
                "side by side (each attending within itself) instead of one and padding: "
                "fewer rows, almost no padding; pretraining reads it as it is"),
            arg("--out", help="output folder"),
            arg("--workers", type=int, default=1, help="processes (default: 1), or Ray "
                "actors with --engine ray; the output is identical whatever the count"),
            arg("--engine", choices=["local", "ray"], default="local", help="local: "
                "processes on this machine; ray: read, tokenize and pack on a Ray cluster's "
                "cores with Ray Data (pip install 'electra[ray]'), the same shards byte for "
                "byte"),
            arg("--address", help="--engine ray: an existing cluster (ray://HOST:10001 or "
                "HOST:6379); default: a local one, started and stopped here"),
            arg("--seed", type=int, default=12345, help="packing seed (default: 12345)"),
            OneOf((arg("--val-input", dest="val_inputs", nargs="+", metavar="PATH",
                       help="held-out text"),
                   arg("--val-fraction", type=float, default=None,
                       help="send this fraction of documents to the validation split"))),
            arg("--text-field", default="text", help="the text field of JSONL, Parquet "
                "and Arrow records (default: text)"),
            arg("--overwrite", action="store_true", help="replace an existing output"),
            arg("--verify", metavar="DATA", help="instead: check a prepared folder in full "
                "(every token id and segment, token counts, file checksums) and exit")),
        description="Tokenize and pack text into memory-mapped shards: --input, --tokenizer "
        "and --out. Or check a prepared folder: --verify DATA."),
    "pretrain": Command(
        "pretrain generator + discriminator (ELECTRA)", "electra.commands.pretrain:main", (
            OneOf((arg("--preset", metavar="NAME", help=Later(
                       lambda: "the paper's model size and pretraining hyperparameters (a "
                       "body's recipe): " + _presets())),
                   arg("--config", metavar="FILE.toml", help="[model] [objective] [train] "
                       "tables; `preset = \"small\"` at the top starts from a preset"))),
            arg("--data", help="a folder written by `electra prepare`, or a weighted mixture "
                "of such folders, A:0.7+B:0.3 (per length phase: comma-separated); else the "
                "--config file's [data] table"),
            arg("--out", required=True, help="the run folder"),
            arg("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                help="override a setting, e.g. --set train.lr=1e-3 --set "
                "train.max_steps=5000 (repeatable); " + section_keys()),
            OneOf((arg("--resume", action="store_true", help="continue from the run's latest "
                       "checkpoint (a new run if none)"),
                   arg("--overwrite", action="store_true",
                       help="delete the run and start again"),
                   arg("--decay-from", metavar="CHECKPOINT", help="a new run in --out that "
                       "continues a WSD run (train.schedule=wsd) from this checkpoint of its "
                       "stable phase (RUN/checkpoints/step-N) into its decay; settings from "
                       "the checkpoint, then --set"))),
            arg("--init", metavar="RUN", help="start from these weights (a run folder, one "
                "made by `electra import`, a transformers folder, or a hub id "
                "org/name[@revision]); the model shape comes from it"),
            arg("--generator", metavar="MASKED_LM", help="train against this masked LM, "
                "frozen (objective fast_electra): a transformers *ForMaskedLM folder or hub "
                "id, a run or its checkpoint, of the data's tokenizer"),
            _device(), _quiet(),
            arg("--stop-after", type=int, metavar="STEPS", help="stop after this many steps "
                "with a checkpoint (for time-limited jobs; continue with --resume)"),
            _dist_timeout()),
        interrupted="", continues=("--resume",),
        description="Pretrain an ELECTRA generator and discriminator on prepared shards. "
        "Config: --preset or --config FILE.toml, then --set section.key=value (sections: "
        "model, objective, train)."),
    "plot": Command(
        "plot a run's losses, accuracies and replaced fraction", "electra.experiments.plot:main", (
            arg("run", help="a pretraining run folder"),
            arg("--out", help="PNG path (default: RUN/curves.png)"))),
    "demo": Command(
        "a short pretraining demo on text that ships with Python",
        "electra.experiments.demo:run_demo", (
            arg("--out", default="runs/demo", help="where to write (default: runs/demo)"),
            arg("--steps", type=int, default=None, help="pretraining steps (default: the "
                "demo's own, 2 minutes on 2 CPU cores with a bf16 unit, 7 without)"),
            arg("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                help="override a pretraining setting of the demo, e.g. --set "
                "train.threads=1 (repeatable; as `electra pretrain --set`)"),
            OneOf((arg("--resume", action="store_true", help="continue an interrupted demo "
                       "from its last checkpoint (its corpus, tokenizer and shards reused)"),
                   arg("--overwrite", action="store_true", help="discard an interrupted "
                       "demo and start it over"))),
            _quiet()), interrupted="", continues=("--resume",)),
    "finetune": Command(
        "fine-tune the discriminator on a task (GLUE, SuperGLUE, SQuAD, tagging, your "
        "files) or several at once", "electra.commands.finetune:main", (
            arg("--model", help="a pretraining run (its discriminator/ or a checkpoint), a "
                "fine-tuned model, a transformers folder, or a hub id org/name[@revision]"),
            arg("--random-init", metavar="PRESET|RUN", help="instead of --model: random "
                "weights, in a preset's shape (needs --tokenizer) or a run's own shape"),
            arg("--tokenizer", help="with --random-init: vocab.txt, tokenizer.json or a hub "
                "id"),
            *_task_args(),
            arg("--out", required=True, help="writes OUT/seed-N/ (one model per seed), "
                "OUT/results.json and OUT/results.md"),
            arg("--seeds", default="1", help="comma-separated, e.g. 1,2,3"),
            arg("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                help=Later(lambda: "a fine-tuning setting (repeatable): " + settings_help(
                    FinetuneConfig) + "; a task family's own: " + _family_settings())),
            OneOf((arg("--overwrite", action="store_true", help="replace an existing --out"),
                   arg("--resume", action="store_true", help="continue an interrupted "
                       "fine-tune (finished seeds are kept, the one in progress restarts "
                       "from its last checkpoint)"))),
            arg("--predict", choices=["test"], help="also write GLUE or SuperGLUE "
                "submission files for the test split(s) to OUT/seed-N/predictions/"),
            _device(), _quiet(), _dist_timeout()),
        interrupted="(finished seeds are kept)", continues=("--resume",)),
    "compare": Command(
        "pretrain objectives at equal FLOPs, fine-tune each, tabulate and plot",
        "electra.experiments.compare:main", (
            arg("--data", required=True, help="a folder written by `electra prepare`"),
            OneOf((arg("--config", metavar="BASE.toml", help="the model and training settings "
                       "every objective shares (no objective.kind)"),
                   arg("--preset", metavar="NAME", help=Later(
                       lambda: "instead of --config: a preset, one of " + _presets())))),
            arg("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                help="override a base setting, e.g. --set train.batch_size=64"),
            arg("--objectives", default="electra,mlm,random", help=Later(
                lambda: "objective kinds, comma-separated (default: electra,mlm,random), "
                "each KIND[:key=value...][:name=NAME] with objective settings of its own "
                "(electra:mask_prob=0.3:mask_prob_end=0.15:name=electra-sched, "
                "fast_electra:generator=RUN); kinds: " + ", ".join(_objectives()))),
            arg("--budget", required=True, help="training FLOPs per objective (e.g. 3e15), "
                "a duration of this machine's compute (30m, 1h, 90s: measured once), or demo "
                "(the tiny model, ~15 minutes in all on a laptop CPU)"),
            arg("--fractions", default="0.25,0.5,1", help="fractions of the budget at which "
                "each objective's discriminator is fine-tuned (default: 0.25,0.5,1)"),
            arg("--tasks", help="comma-separated (default: sst2,mrpc,stsb,rte; with --budget "
                "demo: sst2:max_train_examples=2000): GLUE tasks "
                "(from --glue), with fine-tuning settings as TASK:key=value (e.g. "
                "sst2:max_train_examples=10000), or custom:name=N:train=FILE:dev=FILE"
                "[:text=COL[+COL]][:label=COL][:regression=true]; sts and "
                "retrieval:data=PATH[:split=S] score each model's embeddings as they are "
                "(STS-B from --glue; a BEIR folder or a SQuAD .json)"),
            arg("--glue", metavar="DIR", help="the folder holding GLUE's task folders "
                "(SST-2/, MRPC/, STS-B/, RTE/, ...)"),
            arg("--seeds", default="1,2,3", help="fine-tuning seeds (default: 1,2,3)"),
            arg("--probe", choices=["beside", "only"], help="also (beside) or only fine-tune "
                "linear probes, TASK-probe: the encoder frozen, the head trained at lr 1e-3 "
                "(a low-variance early signal)"),
            arg("--finetune-set", dest="finetune_sets", action="append", default=[],
                metavar="KEY=VALUE", help="a fine-tuning setting for every task (as "
                "`electra finetune --set`)"),
            arg("--out", required=True, help="the comparison's folder; the same command "
                "again continues it"),
            _device(), _quiet(), _dist_timeout()),
        description="The paper's equal-compute comparison: each objective pretrains the same "
        "model for the same training FLOPs, its discriminator is kept at fractions of the "
        "budget, and each, with random init beside them, is fine-tuned on each task and "
        "seed. Writes OUT/results.json, OUT/results.md and OUT/compare.png.",
        interrupted="(what is done is kept)", continues=()),
    "evaluate": Command(
        "reload a fine-tuned model and score a split", "electra.commands.finetune:evaluate", (
            arg("--model", required=True, help="OUT/seed-N from `electra finetune`; sts, "
                "retrieval: any model"),
            *_task_args(evaluate=True),
            arg("--split", default="dev", help="dev (all dev sets), or e.g. dev_matched; "
                "retrieval: the BEIR folder's qrels/SPLIT.tsv (dev: its only one)"),
            arg("--pooling", help="sts, retrieval: the embedding, mean or cls (default: an "
                "embedding model's or a sentence-transformers folder's own, else mean); texts "
                "are cut at the model's own length (a sentence-transformers folder's "
                "max_seq_length, a fine-tuned model's max_length, else its positions) and a "
                "sentence-transformers folder's prompts are used (retrieval: query, document)"),
            arg("--layer", metavar="N[,M...]", help="sts, retrieval: embed with block N's "
                "states (1 the first, -1 the last: the default; -2 the one below it), or the "
                "mean of several blocks' (e.g. 0,1 or -4,-3,-2,-1; 0 the embeddings)"),
            arg("--generator", action="store_true", help="sts, retrieval: embed with a run's "
                "generator instead of its discriminator"),
            arg("--truncate-dim", type=int, metavar="D", help="sts, retrieval: each "
                "embedding's first D dimensions, renormalised (a Matryoshka model's; "
                "default: a sentence-transformers folder's own truncate_dim, else all)"),
            arg("--first-stage", metavar="bm25|MODEL", help="rerank with --data: what finds "
                "each query's documents to rerank, bm25 (default) or any model's embeddings "
                "(as --task retrieval reads it)"),
            arg("--top-k", type=int, metavar="K", help="rerank with --data: how many of the "
                "first stage's documents a query to rerank (default: 100)"),
            arg("--fusion", metavar="W[,W...]", help="rerank with --data: also score each "
                "query's list by (1 - W) x the first stage's score + W x the reranker's, each "
                "min-max normalised over the query's top k (a convex combination; 1: the "
                "reranker alone), for each W in [0, 1] given; choose W on a dev split"),
            _precision(), _device(), _quiet())),
    "mine": Command(
        "mine hard negatives for (query, positive) pairs from a corpus, by BM25 or a model",
        "electra.commands.mine:mine", (
            arg("--data", required=True, help="a BEIR folder or a SQuAD .json (each query "
                "with each relevant document, mined from its corpus), or a pairs file "
                "(query,positive: CSV, TSV, JSONL, Parquet)"),
            arg("--out", required=True, help="the .jsonl file to write"),
            arg("--corpus", help="pairs: the documents to mine from, a JSONL {_id, text} or a "
                "text file of one document a line, streamed (default: the pairs' positives)"),
            arg("--by", default="bm25", metavar="bm25|MODEL", help="what ranks the corpus: "
                "bm25 (default) or any model's embeddings (a run, a fine-tuned embedding "
                "model, a transformers or sentence-transformers folder)"),
            arg("--negatives", type=int, default=7, help="negatives a query (default: 7)"),
            arg("--skip-top", type=int, default=0, metavar="N", help="leave out each query's "
                "first N candidates (likely unlabelled positives; default: 0)"),
            arg("--range", type=int, default=100, metavar="N", help="the candidates a query, "
                "after --skip-top (default: 100)"),
            arg("--margin", type=float, metavar="X", help="keep negatives scoring at most the "
                "positive's score minus X"),
            arg("--max-ratio", type=float, metavar="R", help="keep negatives scoring at most "
                "R times the positive's (e.g. 0.95)"),
            arg("--sample", default="top", choices=["top", "random"], help="the best "
                "candidates that pass (top, default) or a seeded random choice of them"),
            arg("--format", default="groups", choices=["groups", "triplets", "pairs"],
                help="groups: query,positive,negative_1,... (default; --task rerank and "
                "embedding read it); triplets: a row a negative; pairs: query,document,label"),
            arg("--split", default="test", help="a BEIR folder's qrels/SPLIT.tsv (default: "
                "test)"),
            arg("--text-columns", help="a pairs file's QUERY,POSITIVE columns"),
            arg("--seed", type=int, default=0, help="--sample random's seed (default: 0)"),
            arg("--batch-size", type=int, default=32, help="texts a batch (--by MODEL)"),
            _device(), _quiet())),
    "pairs": Command(
        "make (query, positive) pairs from raw text: two spans of one document (Contriever)",
        "electra.commands.pairs:pairs", (
            arg("--input", nargs="+", required=True, help="text as `electra prepare` reads it "
                "(files, folders, globs; a blank line between documents)"),
            arg("--out", required=True, help="the .jsonl file to write (query, positive: what "
                "`finetune --task embedding` reads)"),
            arg("--min-ratio", type=float, default=0.1, help="a span's least share of its "
                "piece (default: 0.1, Contriever's)"),
            arg("--max-ratio", type=float, default=0.5, help="a span's largest share of its "
                "piece (default: 0.5)"),
            arg("--min-words", type=int, default=16, help="a piece with fewer words is left "
                "out (default: 16)"),
            arg("--chunk-words", type=int, default=256, help="a longer document is cut into "
                "pieces of this many words, a pair each (default: 256)"),
            arg("--delete", type=float, default=0.0, help="each word of a span deleted with "
                "this probability (default: 0; Contriever's 0.1)"),
            arg("--max-pairs", type=int, metavar="N", help="a uniform random sample of N "
                "pieces' pairs (default: every piece's)"),
            arg("--seed", type=int, default=0, help="the crops' seed (default: 0)"),
            _quiet())),
    "predict": Command(
        "apply a fine-tuned model to an unlabelled file (one JSON line per input)",
        "electra.commands.predict:main", (
            arg("--model", required=True, help="OUT/seed-N from `electra finetune`"),
            arg("--input", required=True, help="classification/regression: CSV, TSV or JSONL "
                "with the model's text column(s), or plain lines; tagging: .conllu, CoNLL, "
                ".jsonl {tokens} or lines of words; SQuAD: its JSON, or .jsonl {question, "
                "context}"),
            arg("--out", help="a .jsonl file (default: standard output)"),
            arg("--batch-size", type=int, default=64, help="inputs per batch (default: 64)"),
            _precision(), _device(), _quiet())),
    "export": Command(
        "write transformers folders (needs transformers)", "electra.saved.hf:export_hf", (
            arg("source", help="a pretraining run folder, RUN/checkpoints/step-N, or a "
                "fine-tuned model (FT/seed-N)"),
            arg("--out", required=True, help="writes OUT/discriminator and OUT/generator "
                "(ElectraForPreTraining, ElectraForMaskedLM; ModernBert* or DebertaV2* for "
                "those bodies); for a fine-tuned model, OUT itself (its head's ...For* "
                "class)"),
            arg("--overwrite", action="store_true", help="replace an existing --out"),
            arg("--sentence-transformers", metavar="POOLING", help="instead: one folder "
                "sentence_transformers.SentenceTransformer loads, the encoder with POOLING "
                "(mean or cls) and normalisation, as electra.encode embeds (needs "
                "sentence-transformers)"),
            arg("--layer", metavar="N[,M...]", help="with --sentence-transformers: the "
                "encoder cut after block N (1 the first, -1 the last), so it embeds with that "
                "block's states; several (e.g. 0,1 or 2,3,4): the mean of their states "
                "(sentence-transformers' WeightedLayerPooling, equal weights)"),
            arg("--generator", action="store_true", help="with --sentence-transformers: a "
                "run's generator as the encoder"),
            arg("--truncate-dim", type=int, metavar="D", help="with --sentence-transformers "
                "(or an embedding model): its embeddings cut to their first D dimensions "
                "(sentence-transformers' truncate_dim; a Matryoshka model's)"))),
    "push": Command(
        "push a model (and its checkpoints, tagged) to the Hugging Face Hub",
        "electra.saved.push:push", (
            arg("source", help="a pretraining run folder, RUN/checkpoints/step-N, or a "
                "fine-tuned model (FT/seed-N): exported as `electra export` writes it, a run's "
                "discriminator at the repository's root and its generator in generator/"),
            arg("--repo", required=True, metavar="ORG/NAME", help="the hub repository "
                "(HF_ENDPOINT's hub; the token from HF_TOKEN or `hf auth login`)"),
            arg("--checkpoints", action="store_true", help="also each of the run's "
                "checkpoints, one commit each, tagged step-N (decay-N inside a WSD decay), "
                "before the final model"),
            arg("--create", action="store_true", help="make the repository if it is missing"),
            arg("--private", action="store_true", help="with --create: a private repository"),
            arg("--sentence-transformers", metavar="POOLING", help="push the "
                "sentence-transformers folder `electra export --sentence-transformers "
                "POOLING` writes (an embedding model's own pooling without it)"),
            _quiet()),
        interrupted="(what reached the hub is kept)", continues=()),
    "import": Command(
        "read transformers folders into a run folder", "electra.saved.hf:import_hf", (
            arg("hf_dir", help="an ELECTRA, ModernBERT or DebertaV2 folder (config.json + "
                "weights + tokenizer.json, vocab.txt or spm.model), or its hub id "
                "org/name[@revision] (huggingface_hub's cache; HF_HUB_OFFLINE=1: the cache "
                "alone)"),
            arg("--generator", help="a ...ForMaskedLM folder or hub id (default: the folder's "
                "pytorch_model.generator.bin, as the released DeBERTa-V3's, or a fresh "
                "generator sharing the discriminator's embeddings)"),
            arg("--out", required=True, help="writes OUT/discriminator and OUT/generator"),
            arg("--overwrite", action="store_true", help="replace an existing --out"))),
    "detect": Command(
        "show each token's probability of having been replaced, by a discriminator",
        "electra.commands.detect:main", (
            arg("text", nargs="*", help="texts to score (quote each)"),
            arg("--model", required=True, help="a pretraining run, its discriminator/, "
                "RUN/checkpoints/step-N, a transformers ElectraForPreTraining folder, or a "
                "hub id"),
            arg("--input", help="a file of texts: one per line, or .jsonl with \"text\""),
            arg("--html", dest="html_out", metavar="OUT.html", help="also write a page "
                "shading each token by its probability"),
            arg("--json", dest="json_lines", action="store_true", help="print one JSON "
                "object per text: tokens, character offsets, p_replaced"),
            arg("--threshold", type=float, default=0.5, help="highlight tokens at or above "
                "this probability (default: 0.5)"))),
    "bench": Command(
        "benchmark our training step against the transformers-based one "
        "(bench/pretrain_step.py)", "electra.cli:bench", (
            arg("bench_args", nargs=argparse.REMAINDER, help="passed to the benchmark"),),
        description="Runs bench/pretrain_step.py; arguments pass through (e.g. electra bench "
        "--batch 128 --repeats 3)."),
}


# Each command's refusals that need no torch, run before its module is imported
for _name in ("pretrain", "finetune", "compare", "evaluate", "predict", "detect", "export"):
    COMMANDS[_name] = dataclasses.replace(COMMANDS[_name],
                                          check=f"electra.commands.checks:{_name}")

GROUPS = {"tokenizer": "train a tokenizer (WordPiece, BPE, Unigram)"}  # commands with actions


def bench(bench_args: list[str]) -> None:
    """`electra bench`: run bench/pretrain_step.py from a source checkout."""
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "pretrain_step.py"
    if not script.is_file():
        raise UserError("electra bench runs bench/pretrain_step.py from a source checkout "
                        "(pip install -e .); it is not part of an installed wheel")
    sys.argv = [str(script), *bench_args]
    runpy.run_path(str(script), run_name="__main__")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors: one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add(parser: argparse.ArgumentParser, args: tuple[Arg | OneOf, ...]) -> None:
    for a in args:
        if isinstance(a, OneOf):
            group = parser.add_mutually_exclusive_group()
            for b in a.args:
                group.add_argument(*b.flags, **b.options)
        else:
            parser.add_argument(*a.flags, **a.options)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="electra", description="ELECTRA pretraining (replaced-token detection) "
                "and fine-tuning. Run `electra demo` for a short pretraining demo.")
    p.add_argument("--version", action="version", version=f"electra {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    groups: dict[str, Any] = {}
    for name, cmd in COMMANDS.items():
        *group, leaf = name.split()
        where = sub
        if group:  # "tokenizer train": a command with actions
            if group[0] not in groups:
                g = sub.add_parser(group[0], help=GROUPS[group[0]])
                groups[group[0]] = g.add_subparsers(dest=f"{group[0]}_command",
                                                    metavar="ACTION", parser_class=_Parser)
            where = groups[group[0]]
        c = where.add_parser(leaf, help=cmd.help, description=cmd.description or cmd.help)
        _add(c, cmd.args)
        c.set_defaults(_target=cmd.target, _interrupted=cmd.interrupted,
                       _continues=cmd.continues, _check=cmd.check, **cmd.defaults)
    return p


def interrupted_line(err: KeyboardInterrupt, note: str, continues: tuple[str, ...] | None,
                     ) -> str:
    """The last line after Ctrl-C or a signal: what stopped it and the exact command that
    continues it (electra.invocation: as the user started it)."""
    what = f"stopped by {err.name}" if isinstance(err, Stopped) else "interrupted"
    if continues is None:
        return f"electra: {what}; {note}"
    again = invocation.command(add=continues, drop=("--overwrite",),
                               drop_with_value=("--decay-from",))
    return f"electra: {what}; continue it with {again}" + (f" {note}" if note else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    invocation.record(argv)
    target = args.pop("_target", None)
    interrupted = args.pop("_interrupted", "")
    continues = args.pop("_continues", None)
    check = args.pop("_check", None)
    if target is None:
        parser.print_help()
        return 0 if args.get("command") is None else 2
    kwargs = {k: v for k, v in args.items() if k != "command" and not k.endswith("_command")}
    module, function = target.split(":")
    if not _checked(check, kwargs):
        return 2
    try:
        with handling():  # SIGTERM and SIGUSR1 end as Ctrl-C does (electra.train.stop)
            getattr(importlib.import_module(module), function)(**kwargs)
        return 0
    except UserError as err:
        from electra.runtime import launched  # here: the runtime imports torch

        place = launched()
        if place.is_main or not getattr(err, "shared", False):
            rank = f" (rank {place.rank})" if place.enabled and not place.is_main else ""
            print(f"electra: error{rank}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or electra.train.stop.Stopped
        if environ.get("RANK") == 0:  # under torchrun: rank 0 says it
            print(interrupted_line(err, interrupted, continues), file=sys.stderr)
        return 128 + getattr(err, "signum", 2)
    except MemoryError:
        print("electra: error: out of memory; choose a smaller model or batch "
              "(--set train.batch_size=N, or grad_accum to keep the batch)", file=sys.stderr)
        return 2
    except RuntimeError as err:
        text = str(err)
        if "can't allocate memory" not in text and "out of memory" not in text.lower():
            raise
        print(f"electra: error: out of memory ({text.splitlines()[0][:160]}); choose a "
              f"smaller model or batch (--set train.batch_size=N, or grad_accum to keep the "
              f"batch)", file=sys.stderr)
        return 2
    except OSError as err:  # a writer the disk failed under, that said nothing more itself
        from pathlib import Path

        from electra.io.files import disk_problem  # light, but only an error needs it

        problem = disk_problem(err, Path(err.filename or "."))
        if problem is None:
            raise
        print(f"electra: error: {problem}: {err.filename or 'a file'}; free some space (or "
              f"choose another --out) and run it again", file=sys.stderr)
        return 2


def _checked(check: str | None, kwargs: dict[str, Any]) -> bool:
    """The environment, then what the command refuses before importing torch (``check``):
    False once a refusal is said (under torchrun by rank 0)."""
    try:
        environ.check()
        if check is not None:
            name, fn = check.split(":")
            getattr(importlib.import_module(name), fn)(**kwargs)
    except UserError as err:  # (before launched(), which reads the environment)
        if _world_rank() == 0:
            print(f"electra: error: {err}", file=sys.stderr)
        return False
    return True


def _world_rank() -> int:
    try:
        return int(environ.get("RANK"))
    except UserError:  # (the error says so)
        return 0


def _world_size() -> int:
    try:
        return int(environ.get("WORLD_SIZE"))
    except UserError:  # main said so
        return 1


def entry() -> NoReturn:
    """The `electra` command and `python -m electra`: run :func:`main` and exit with its code."""
    code = main()
    if _world_size() > 1:
        # Under torchrun, end the process here, without interpreter finalization. A DDP
        # model keeps a reference to the gloo process group that destroy_process_group does
        # not release (torch 2.13), so gloo's threads still run at exit, and exit-time
        # destructors racing with them occasionally abort a rank that had finished cleanly
        # ("terminate called without an active exception"). Every file is closed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
