"""The `electra` command line: a thin layer that parses, validates and calls one function.

Problems the user can fix (:class:`electra.errors.UserError`) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from electra import __version__
from electra.errors import UserError

Handler = Callable[[argparse.Namespace], int | None]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _cmd_tokenizer_train(args: argparse.Namespace) -> None:
    from electra.tokenizer import train_tokenizer

    train_tokenizer(args.input, args.vocab_size, args.out, lowercase=args.lowercase,
                    overwrite=args.overwrite)


def _cmd_prepare(args: argparse.Namespace) -> None:
    from electra.data.prepare import PrepareOptions, prepare

    prepare(PrepareOptions(
        inputs=args.input, tokenizer=args.tokenizer, seq_len=args.seq_len, out=args.out,
        workers=args.workers, seed=args.seed, val_inputs=args.val_input,
        val_fraction=args.val_fraction, overwrite=args.overwrite, text_field=args.text_field,
    ))


def _cmd_pretrain(args: argparse.Namespace) -> None:
    from electra.config import load_run_config
    from electra.pretrain import PretrainOptions, pretrain

    if args.preset is None and args.config is None and not args.resume:
        raise UserError("give --preset NAME (tiny, small, base, large) or --config FILE.toml")
    config = _resumed_config(args) if args.preset is None and args.config is None else (
        load_run_config(args.preset, args.config, args.set))
    from electra.distributed import teardown

    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after {args.stop_after}: give a number of steps >= 1")
    try:
        pretrain(PretrainOptions(data=args.data, out=args.out, config=config,
                                 resume=args.resume, overwrite=args.overwrite,
                                 progress=not args.quiet, device=args.device, init=args.init,
                                 dist_timeout=args.dist_timeout, stop_after=args.stop_after))
    finally:
        teardown()


def _resumed_config(args: argparse.Namespace):
    """`--resume` alone: the run's own config, with --set applied."""
    import json
    from pathlib import Path

    from electra.config import RunConfig, apply_overrides

    path = Path(args.out) / "config.json"
    if not path.is_file():
        raise UserError(f"--resume: {path} not found; give --preset or --config to start a run")
    saved = json.loads(path.read_text())
    return RunConfig.from_dict(apply_overrides(
        {k: saved[k] for k in ("model", "objective", "train")}, args.set))


def _cmd_plot(args: argparse.Namespace) -> None:
    from electra.plot import plot_run

    print(f"wrote {plot_run(args.run, args.out)}")


def _cmd_demo(args: argparse.Namespace) -> None:
    from electra.demo import run_demo

    run_demo(args.out, steps=args.steps, overwrite=True, progress=not args.quiet)


def _cmd_export(args: argparse.Namespace) -> None:
    from electra.interop import export_hf

    export_hf(args.source, args.out, overwrite=args.overwrite)


def _cmd_import(args: argparse.Namespace) -> None:
    from electra.interop import import_hf

    import_hf(args.hf_dir, args.out, gen_dir=args.generator, overwrite=args.overwrite)


def _task_data(args: argparse.Namespace, split: str | None = None):
    from electra.data.tasks import glue_task, read_custom, read_glue
    from electra.finetune import TaskData

    if args.task == "custom":
        if getattr(args, "predict", None):
            raise UserError("--predict test writes GLUE submission files; for a custom task "
                            "score your file with `electra evaluate --dev FILE`")
        if (not args.train and split is None) or not args.dev:
            raise UserError("--task custom needs --train FILE and --dev FILE (and "
                            "--text-columns, --label-column)")
        cols = [c for c in args.text_columns.split(",") if c]
        train = (read_custom(args.train, cols, args.label_column, args.regression)
                 if args.train else [])
        dev = read_custom(args.dev, cols, args.label_column, args.regression)
        metrics = ("pearson", "spearman") if args.regression else ("accuracy",)
        return TaskData("custom", train, {"dev": dev}, metrics, args.regression)
    spec = glue_task(args.task)
    if args.data is None:
        raise UserError(f"--task {args.task} needs --data GLUE_TASK_DIR")
    splits = list(spec.dev) if split in (None, "dev") else [split]
    train = read_glue(spec, args.data, "train") if split is None else []
    dev = {s: read_glue(spec, args.data, s) for s in splits}
    labels = {label: i for i, label in enumerate(spec.labels)} if spec.labels else {}
    test = ({s: read_glue(spec, args.data, s) for s in spec.test}
            if getattr(args, "predict", None) == "test" else {})
    return TaskData(spec.name, train, dev, spec.metrics, spec.is_regression, labels, test)


def _finetune_config(sets: list[str]):
    from electra.config import config_from_dict, parse_set
    from electra.finetune import FinetuneConfig

    values = dict(parse_set(item, "lr=1e-4") for item in sets)
    return config_from_dict(FinetuneConfig, values, "fine-tuning settings")


def _cmd_finetune(args: argparse.Namespace) -> None:
    from electra.finetune import run_finetune

    data = _task_data(args)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.random_init:
        from pathlib import Path

        from electra.config import model_preset
        from electra.tokenizer import load_tokenizer

        src = Path(args.random_init)
        if src.is_dir():  # the architecture (and tokenizer) of a model folder, fresh weights
            from electra.pretrained import load_pretrained

            cfg = load_pretrained(src, "discriminator").config
            tokenizer = src / "discriminator" if (src / "discriminator").is_dir() else src
        else:
            if not args.tokenizer:
                raise UserError("--random-init PRESET needs --tokenizer (vocab.txt or "
                                "tokenizer.json)")
            tokenizer = args.tokenizer
            vocab = load_tokenizer(tokenizer).get_vocab_size()
            cfg = model_preset(args.random_init, vocab_size=vocab)
        model, model_cfg = None, cfg
    else:
        if not args.model:
            raise UserError("give --model RUN (or --random-init PRESET --tokenizer PATH)")
        model, model_cfg, tokenizer = args.model, None, None
    from electra.distributed import teardown

    try:
        run_finetune(model, model_cfg, data, args.out, _finetune_config(args.set), seeds,
                     args.overwrite, tokenizer=tokenizer, device=args.device,
                     dist_timeout=args.dist_timeout)
    finally:
        teardown()


def _cmd_evaluate(args: argparse.Namespace) -> None:
    from electra.finetune import FinetuneConfig, evaluate_model, load_classifier
    from electra.tokenizer import load_tokenizer

    model, meta = load_classifier(args.model)
    if args.task != meta["task"]:
        raise UserError(f"--model {args.model} was fine-tuned on {meta['task']}, not "
                        f"{args.task}")
    data = _task_data(args, split=args.split)
    data.labels = meta["labels"]
    cfg = FinetuneConfig(**meta["finetune"])
    res = evaluate_model(model, load_tokenizer(args.model), data, cfg)
    print(json.dumps(res))


def _cmd_bench(args: argparse.Namespace) -> None:
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "pretrain_step.py"
    if not script.is_file():
        raise UserError("electra bench runs bench/pretrain_step.py from a source checkout "
                        "(pip install -e .); it is not part of an installed wheel")
    sys.argv = [str(script), *args.bench_args]
    runpy.run_path(str(script), run_name="__main__")


def _dist_timeout_arg(parser: argparse.ArgumentParser) -> None:
    from electra.distributed import DEFAULT_TIMEOUT_S

    parser.add_argument("--dist-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        metavar="SECONDS", help="under torchrun: how long a process waits for "
                        "the others before stopping with an error (default: %(default)g)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="electra", description="ELECTRA pretraining (replaced-token detection) "
                "and fine-tuning. Run `electra demo` for a short pretraining demo.")
    p.add_argument("--version", action="version", version=f"electra {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    tok = sub.add_parser("tokenizer", help="train a WordPiece tokenizer")
    tok_sub = tok.add_subparsers(dest="tokenizer_command", metavar="ACTION",
                                 parser_class=_Parser)
    tt = tok_sub.add_parser("train", help="train WordPiece on raw text; writes vocab.txt and "
                            "tokenizer.json")
    tt.add_argument("--input", nargs="+", required=True, metavar="PATH",
                    help="text files, directories or globs (.txt, .jsonl, .gz)")
    tt.add_argument("--vocab-size", type=int, default=30522, help="default: 30522")
    tt.add_argument("--out", required=True, help="output folder")
    case = tt.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=True,
                      help="lowercase and strip accents, like bert-base-uncased (default)")
    case.add_argument("--cased", dest="lowercase", action="store_false",
                      help="keep case and accents")
    tt.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer")
    tt.set_defaults(handler=_cmd_tokenizer_train)

    pr = sub.add_parser("prepare", help="tokenize and pack text into memory-mapped shards")
    pr.add_argument("--input", nargs="+", required=True, metavar="PATH",
                    help="text files, directories or globs (.txt, .jsonl, .gz): one sentence "
                    "or paragraph per line, blank line between documents")
    pr.add_argument("--tokenizer", required=True,
                    help="a tokenizer folder, tokenizer.json or vocab.txt")
    pr.add_argument("--seq-len", type=int, default=128, help="example length (default: 128)")
    pr.add_argument("--out", required=True, help="output folder")
    pr.add_argument("--workers", type=int, default=1, help="processes (default: 1); the "
                    "output is identical whatever the count")
    pr.add_argument("--seed", type=int, default=12345, help="packing seed (default: 12345)")
    val = pr.add_mutually_exclusive_group()
    val.add_argument("--val-input", nargs="+", metavar="PATH", help="held-out text")
    val.add_argument("--val-fraction", type=float, default=None,
                     help="send this fraction of documents to the validation split")
    pr.add_argument("--text-field", default="text", help="JSONL field holding the text")
    pr.add_argument("--overwrite", action="store_true", help="replace an existing output")
    pr.set_defaults(handler=_cmd_prepare)

    pt = sub.add_parser("pretrain", help="pretrain generator + discriminator (ELECTRA)",
                        description="Pretrain an ELECTRA generator and discriminator on "
                        "prepared shards. Config: --preset or --config FILE.toml, then "
                        "--set section.key=value (sections: model, objective, train).")
    src = pt.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=["tiny", "small", "base", "large"],
                     help="the paper's model size and pretraining hyperparameters")
    src.add_argument("--config", metavar="FILE.toml", help="[model] [objective] [train] "
                     "tables; `preset = \"small\"` at the top starts from a preset")
    pt.add_argument("--data", required=True, help="a folder written by `electra prepare`")
    pt.add_argument("--out", required=True, help="the run folder")
    pt.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting, e.g. --set train.lr=1e-3 --set "
                    "train.max_steps=5000 (repeatable)")
    mode = pt.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="continue from the run's latest checkpoint (a new run if none)")
    mode.add_argument("--overwrite", action="store_true", help="delete the run and start again")
    pt.add_argument("--init", metavar="RUN", help="start from these weights (a run folder, or "
                    "one made by `electra import`); the model shape comes from it")
    pt.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda, cuda:1")
    pt.add_argument("--quiet", action="store_true", help="no progress bar")
    pt.add_argument("--stop-after", type=int, metavar="STEPS", help="stop after this many "
                    "steps with a checkpoint (for time-limited jobs; continue with --resume)")
    _dist_timeout_arg(pt)
    pt.set_defaults(handler=_cmd_pretrain)

    pl = sub.add_parser("plot", help="plot a run's losses, accuracies and replaced fraction")
    pl.add_argument("run", help="a pretraining run folder")
    pl.add_argument("--out", help="PNG path (default: RUN/curves.png)")
    pl.set_defaults(handler=_cmd_plot)

    de = sub.add_parser("demo", help="a short pretraining demo on text that ships with Python")
    de.add_argument("--out", default="runs/demo", help="where to write (default: runs/demo)")
    de.add_argument("--steps", type=int, default=None, help="pretraining steps (default: "
                    "the demo's own, about 3 minutes on 2 CPU cores)")
    de.add_argument("--quiet", action="store_true", help="no progress bar")
    de.set_defaults(handler=_cmd_demo)

    ft = sub.add_parser("finetune", help="fine-tune the discriminator on GLUE or a custom task")
    ft.add_argument("--model", help="a pretraining run (or its discriminator/ folder)")
    ft.add_argument("--random-init", metavar="PRESET|RUN", help="instead of --model: random "
                    "weights, in a preset's shape (needs --tokenizer) or a run's own shape")
    ft.add_argument("--tokenizer", help="with --random-init: vocab.txt or tokenizer.json")
    ft.add_argument("--task", required=True, help="cola, sst2, mrpc, stsb, qqp, mnli, qnli, "
                    "rte, wnli or custom")
    ft.add_argument("--data", help="the GLUE task folder (e.g. glue/SST-2)")
    ft.add_argument("--train", help="custom: training file (.csv, .tsv, .jsonl)")
    ft.add_argument("--dev", help="custom: dev file")
    ft.add_argument("--text-columns", default="text", help="custom: A or A,B")
    ft.add_argument("--label-column", default="label", help="custom: the label column")
    ft.add_argument("--regression", action="store_true", help="custom: numeric labels")
    ft.add_argument("--out", required=True, help="writes OUT/seed-N/ (one model per seed), "
                    "OUT/results.json and OUT/results.md")
    ft.add_argument("--seeds", default="1", help="comma-separated, e.g. 1,2,3")
    ft.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="lr, layer_decay, epochs, batch_size, max_length, warmup_fraction, "
                    "weight_decay, precision, double_pairs, max_train_examples")
    ft.add_argument("--overwrite", action="store_true")
    ft.add_argument("--predict", choices=["test"], help="also write GLUE submission files for "
                    "the test split(s) to OUT/seed-N/predictions/")
    ft.add_argument("--device", default="auto", help="auto (cuda if present), cpu, cuda")
    _dist_timeout_arg(ft)
    ft.set_defaults(handler=_cmd_finetune)

    ev = sub.add_parser("evaluate", help="reload a fine-tuned model and score a split")
    ev.add_argument("--model", required=True, help="OUT/seed-N from `electra finetune`")
    ev.add_argument("--task", required=True)
    ev.add_argument("--data", help="the GLUE task folder")
    ev.add_argument("--dev", help="custom: the file to score")
    ev.add_argument("--train", help=argparse.SUPPRESS)
    ev.add_argument("--text-columns", default="text")
    ev.add_argument("--label-column", default="label")
    ev.add_argument("--regression", action="store_true")
    ev.add_argument("--split", default="dev", help="dev (all dev sets), or e.g. dev_matched")
    ev.set_defaults(handler=_cmd_evaluate)

    ex = sub.add_parser("export", help="write transformers ELECTRA folders (needs transformers)")
    ex.add_argument("source", help="a pretraining run folder, RUN/checkpoints/step-N, or a "
                    "fine-tuned model (FT/seed-N)")
    ex.add_argument("--out", required=True, help="writes OUT/discriminator and OUT/generator "
                    "(ElectraForPreTraining, ElectraForMaskedLM); for a fine-tuned model, OUT "
                    "itself (ElectraForSequenceClassification)")
    ex.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    ex.set_defaults(handler=_cmd_export)

    im = sub.add_parser("import", help="read transformers ELECTRA folders into a run folder")
    im.add_argument("hf_dir", help="an ElectraForPreTraining folder (config.json + weights "
                    "+ vocab.txt/tokenizer.json)")
    im.add_argument("--generator", help="an ElectraForMaskedLM folder (default: a fresh "
                    "generator sharing the discriminator's embeddings)")
    im.add_argument("--out", required=True, help="writes OUT/discriminator and OUT/generator")
    im.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    im.set_defaults(handler=_cmd_import)

    be = sub.add_parser("bench", help="benchmark our training step against the "
                        "transformers-based one (bench/pretrain_step.py)",
                        description="Runs bench/pretrain_step.py; arguments pass through "
                        "(e.g. electra bench --batch 128 --repeats 3).")
    be.add_argument("bench_args", nargs=argparse.REMAINDER, help="passed to the benchmark")
    be.set_defaults(handler=_cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(handler(args) or 0)
    except UserError as err:
        from electra.distributed import launched

        place = launched()
        if place.is_main or not getattr(err, "shared", False):
            rank = f" (rank {place.rank})" if place.enabled and not place.is_main else ""
            print(f"electra: error{rank}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("electra: interrupted", file=sys.stderr)
        return 130


def entry() -> NoReturn:
    """The `electra` command and `python -m electra`: run :func:`main` and exit with its code."""
    code = main()
    from electra.distributed import launched

    if launched().enabled:
        # Under torchrun, end the process here, without interpreter finalization. A DDP
        # model keeps a reference to the gloo process group that destroy_process_group does
        # not release (torch 2.13), so gloo's threads still run at exit, and exit-time
        # destructors racing with them occasionally abort a rank that had finished cleanly
        # ("terminate called without an active exception"). Every file is closed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
