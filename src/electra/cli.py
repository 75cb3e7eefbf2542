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
