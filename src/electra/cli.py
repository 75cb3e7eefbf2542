"""The `electra` command line: a thin layer that parses, validates and calls one function.

Problems the user can fix (:class:`electra.errors.UserError`) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

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
    pretrain(PretrainOptions(data=args.data, out=args.out, config=config, resume=args.resume,
                             overwrite=args.overwrite, progress=not args.quiet,
                             device=args.device, init=args.init))


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


def _cmd_bench(args: argparse.Namespace) -> None:
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "pretrain_step.py"
    if not script.is_file():
        raise UserError("electra bench runs bench/pretrain_step.py from a source checkout "
                        "(pip install -e .); it is not part of an installed wheel")
    sys.argv = [str(script), *args.bench_args]
    runpy.run_path(str(script), run_name="__main__")


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

    ex = sub.add_parser("export", help="write transformers ELECTRA folders (needs transformers)")
    ex.add_argument("source", help="a pretraining run folder or RUN/checkpoints/step-N")
    ex.add_argument("--out", required=True, help="writes OUT/discriminator and OUT/generator")
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
        print(f"electra: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("electra: interrupted", file=sys.stderr)
        return 130
