"""Does a checkout pretrain bit for bit as another does? A 12-step fp32 run with dropout.

    python bench/bitwise_pretrain.py CHECKOUT_A CHECKOUT_B

Each checkout's own ``electra`` (its ``src``, this venv's packages) packs the same text with
the same vocabulary, pretrains the default objective (``--preset tiny``, the paper's
ELECTRA, dropout 0.1, fp32) for 12 steps with validation, and the script compares every
line of ``metrics.jsonl`` (times left out) and a SHA-256 of every saved weight tensor. Exit 0
when both agree bit for bit; otherwise it names the first difference. ``--tolerance R``:
where they differ, the largest relative difference of every metric and weight, and exit 0
when no loss and no weight differs by more than R (a change that reorders a sum: say why in
the commit; rank statistics such as the AUC move more and are shown, not judged).

``--form``: how the run reads its data: ``local`` (one prepared folder, the default),
``mixture`` (that folder and a second one prepared with another seed, ``--data A:0.7+B:0.3``)
or ``streamed`` (the folder uploaded by each checkout's ``prepare --out s3://...`` to an S3
server of the script's own, moto's, and read under ``train.shuffle=blocks``).

Weights are compared as the newer layout holds them: a checkout that saved each block's
query, key and value as three tensors has them stacked into the one ``qkv`` tensor first.

Without ``../shared/data`` it packs the Python docs' text files and the vocabulary of a
tokenizer trained on them (both checkouts read the same files).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
TIMES = {"time", "elapsed", "seconds", "tokens_per_s", "step_s", "data_s", "eta_s", "mfu",
         "wall", "flops_per_s", "sec", "samples_per_s"}


def run(checkout: Path, work: Path, text: Path, vocab: Path, precision: str = "fp32",
        form: str = "local", store: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "OMP_NUM_THREADS": "2",
           **(store or {}), "ELECTRA_CACHE": str(work / "cache")}
    cli = [sys.executable, "-m", "electra"]
    data, out = str(work / "data"), work / "run"
    prepare = [*cli, "prepare", "--input", str(text), "--tokenizer", str(vocab), "--seq-len",
               "64", "--val-fraction", "0.05"]
    subprocess.run([*prepare, "--out", data], check=True, env=env, capture_output=True)
    extra: tuple[str, ...] = ()
    if form == "mixture":
        subprocess.run([*prepare, "--out", str(work / "other"), "--seed", "1"], check=True,
                       env=env, capture_output=True)
        data = f"{data}:0.7+{work / 'other'}:0.3"
    elif form == "streamed":
        url = f"s3://data/{work.name}"
        subprocess.run([*prepare, "--out", url], check=True, env=env, capture_output=True)
        data, extra = url, ("train.shuffle=blocks", "train.shuffle_block=64")
    subprocess.run([*cli, "pretrain", "--preset", "tiny", "--data", data, "--out",
                    str(out), "--quiet", "--device", "cpu",
                    *[a for kv in (*extra, "train.max_steps=12", "train.batch_size=16",
                                   f"train.precision={precision}", "train.log_every=3",
                                   "train.eval_every=6", "train.save_every=6",
                                   "train.warmup_steps=4",
                                   # two threads whatever the machine's load (0 takes fewer
                                   # on a busy one: another order of sums)
                                   "train.threads=2",
                                   # the slots older checkouts used at every length
                                   "objective.max_predictions=19")
                      for a in ("--set", kv)]],
                   check=True, env=env, capture_output=True)
    from safetensors.torch import load_file

    metrics = [{k: v for k, v in json.loads(line).items() if k not in TIMES}
               for line in (out / "metrics.jsonl").read_text().splitlines()]
    weights = {}
    for part in ("discriminator", "generator"):
        state = load_file(str(out / part / "model.safetensors"))
        for k in [k for k in state if k.endswith(("query.weight", "query.bias"))]:
            head, tail = k.rsplit("query.", 1)
            state[f"{head}qkv.{tail}"] = torch.cat(
                [state.pop(f"{head}{n}.{tail}") for n in ("query", "key", "value")])
        weights.update({f"{part}/{k}": v for k, v in state.items()})
    return {"metrics": metrics, "weights": weights}


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


def largest_differences(a: dict, b: dict) -> dict[str, float]:
    """Per metric (and for all weights together), the largest relative difference."""
    out: dict[str, float] = {}
    for x, y in zip(a["metrics"], b["metrics"], strict=True):
        for k in set(x) | set(y):
            u, v = x.get(k), y.get(k)
            if isinstance(u, (int, float)) and isinstance(v, (int, float)):
                out[k] = max(out.get(k, 0.0), abs(u - v) / max(1e-12, abs(u), abs(v)))
            elif u != v:
                out[k] = float("inf")
    out["weights"] = max((float((a["weights"][k] - b["weights"][k]).abs().max()
                                / max(1e-12, float(a["weights"][k].abs().max())))
                          for k in a["weights"]), default=0.0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--tolerance", type=float, help="largest relative difference allowed")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="the runs' train.precision (bf16, fp16: autocast's path)")
    ap.add_argument("--form", default="local", choices=["local", "mixture", "streamed"],
                    help="the data: one local folder, a mixture of two, a store's streamed")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(_store()) if args.form == "streamed" else None
        return _compare(args, store)


@contextlib.contextmanager
def _store():
    """An S3 server of moto's on a free port, a bucket ``data`` in it, and the environment
    that reaches it."""
    import fsspec
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    os.environ.update(env)
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir("data")
    try:
        yield env
    finally:
        server.stop()


def _compare(args: argparse.Namespace, store: dict[str, str] | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if SHARED.is_dir():
            text = SHARED / "corpus" / "heldout"
            vocab = SHARED / "vocab" / "bert-base-uncased-vocab.txt"
        else:
            raise SystemExit("bench/bitwise_pretrain.py needs ../shared/data")
        got = {}
        for name, checkout in (("A", args.a), ("B", args.b)):
            (tmp / name).mkdir()
            got[name] = run(checkout.resolve(), tmp / name, text, vocab, args.precision,
                            args.form, store)
        a, b = got["A"], got["B"]
        print(f"metrics lines: {len(a['metrics'])} / {len(b['metrics'])}; weight tensors: "
              f"{len(a['weights'])} / {len(b['weights'])}")
        if (len(a["metrics"]) != len(b["metrics"])
                or a["weights"].keys() != b["weights"].keys()):
            print("the runs logged different lines or saved different tensors")
            return 1
        same = a["metrics"] == b["metrics"] and all(
            digest(a["weights"][k]) == digest(b["weights"][k]) for k in a["weights"])
        if not same:
            diffs = largest_differences(a, b)
            shown = {k: f"{v:.1e}" for k, v in sorted(diffs.items()) if v}
            print(f"not bitwise; largest relative differences: {shown}")
            judged = [v for k, v in diffs.items() if "loss" in k or k == "weights"]
            if args.tolerance is None or max(judged) > args.tolerance:
                return 1
            print(f"within the tolerance {args.tolerance:g}")
            return 0
        print("bitwise equal: every metrics line and every weight tensor")
        print(json.dumps(a["metrics"][-1]))
        return 0


if __name__ == "__main__":
    sys.exit(main())
