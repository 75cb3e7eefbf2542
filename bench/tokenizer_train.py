"""The cost of a repeatable WordPiece tokenizer: `electra tokenizer train`'s two passes (the
alphabet first, then the merges with every ``##`` piece numbered) against the tokenizers
library's single pass, interleaved, on the same text.

    python bench/tokenizer_train.py FILE [--mb 20] [--vocab 30522] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

from electra.data.tokenizer import _new_tokenizer, _train


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--mb", type=float, default=20.0, help="first MB of the file")
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    with open(a.file, encoding="utf-8", errors="replace") as f:
        lines = f.read(int(a.mb * 1e6)).splitlines()

    def chunks():
        for i in range(0, len(lines), 10000):
            yield [line for line in lines[i : i + 10000] if line]

    times: dict[str, list[float]] = {"library, one pass": [], "electra, two passes": []}
    for _ in range(a.repeats):
        for name in times:
            t0 = time.perf_counter()
            if name.startswith("library"):
                tok, trainer = _new_tokenizer("wordpiece", a.vocab, 2, True)
                tok.train_from_iterator(chunks(), trainer=trainer)
            else:
                _train("wordpiece", a.vocab, 2, True, chunks)
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        print(f"{name}: min {min(ts):.1f} s, median {statistics.median(ts):.1f} s, max "
              f"{max(ts):.1f} s")


if __name__ == "__main__":
    main()
