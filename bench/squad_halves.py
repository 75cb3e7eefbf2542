"""SQuAD v1.1 dev split by article, as the retrieval benches use it (issue 72): the first half
of the articles in OUT/train.json, the second half in OUT/test.json (each a SQuAD file).

    python bench/squad_halves.py ../shared/data/squad/dev-v1.1.json OUT
"""

from __future__ import annotations

import json
import sys


def main(source: str, out: str) -> None:
    with open(source, encoding="utf-8") as f:
        doc = json.load(f)
    half = len(doc["data"]) // 2
    for name, part in (("train", doc["data"][:half]), ("test", doc["data"][half:])):
        with open(f"{out}/{name}.json", "w", encoding="utf-8") as f:
            json.dump({"version": doc["version"], "data": part}, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
