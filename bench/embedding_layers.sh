#!/usr/bin/env bash
# Which states of a pretrained run embed best, zero-shot (issue 72): each block's (--layer N),
# the mean of several (the embeddings and block 1, first-last, all),
# the generator's, and the same shape from random init, on STS-B dev (Spearman) and on the
# held-out half of SQuAD dev split by article (nDCG@10 over its 1,019 paragraphs, BM25's
# beside it).
#
#   bash bench/embedding_layers.sh RUN [OUT]     (default OUT: runs/embedding-layers)
#   GENERATOR=RUN2 ...: the generator of RUN2 where RUN has none (a frozen one)
#
# RUN: a pretraining run (its discriminator/ and generator/), e.g. a compare run's
# pretrain/OBJECTIVE. Results: OUT/results.jsonl, a line an encoder and evaluation.
set -euo pipefail
RUN=$1
OUT=${2:-runs/embedding-layers}
SHARED=${SHARED:-../shared/data}
mkdir -p "$OUT"
if [ ! -f "$OUT/test.json" ]; then  # the second half of SQuAD dev's articles (as rerank_squad.sh)
    python "$(dirname "$0")/squad_halves.py" "$SHARED/squad/dev-v1.1.json" "$OUT"
fi
blocks=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['model']['num_layers'])" \
    "$RUN/discriminator/config.json")
[ -f "$OUT/random/discriminator/model.safetensors" ] || python - "$RUN" "$OUT/random" <<'EOF'
import sys
from pathlib import Path

import torch
from electra.data.tokenizer import load_tokenizer
from electra.model import Discriminator
from electra.saved import folders
cfg, _ = folders.read_config(folders.resolve(sys.argv[1]), "discriminator")
torch.manual_seed(0)
folders.save(Discriminator(cfg), "discriminator", Path(sys.argv[2]) / "discriminator",
             load_tokenizer(f"{sys.argv[1]}/discriminator"))
EOF
score() {  # NAME MODEL FLAGS...: one line of results.jsonl for each evaluation
    local name=$1 model=$2; shift 2
    grep -q "\"encoder\": \"$name\"" "$OUT/results.jsonl" 2>/dev/null && return 0
    sts=$(electra evaluate --model "$model" --task sts --data "$SHARED/glue/STS-B" --quiet "$@" | tail -1)
    ret=$(electra evaluate --model "$model" --task retrieval --data "$OUT/test.json" --quiet "$@" | tail -1)
    echo "{\"encoder\": \"$name\", \"sts\": $sts, \"retrieval\": $ret}" >> "$OUT/results.jsonl"
}
for n in $(seq 1 "$blocks"); do score "layer $n" "$RUN" --layer "$n"; done
score "mean of 0,1" "$RUN" --layer 0,1  # the embeddings and block 1
score "mean of 0,$blocks" "$RUN" --layer "0,$blocks"  # first-last
score "mean of all" "$RUN" --layer "$(seq -s, 0 "$blocks")"
if [ -d "$RUN/generator" ]; then
    score generator "$RUN" --generator
elif [ -n "${GENERATOR:-}" ]; then  # a run with a frozen generator (fast_electra): give its run
    score generator "$GENERATOR" --generator
fi
score random-init "$OUT/random"
python - "$OUT/results.jsonl" <<'EOF'
import json, sys
print("| encoder | STS-B Spearman | SQuAD held-out nDCG@10 |\n|---|---|---|")
bm25 = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    ret = next(iter(r["retrieval"].values()))
    bm25 = ret.get("bm25", bm25)
    print(f"| {r['encoder']} | {r['sts']['dev']['spearman']:.3f} | {ret['ndcg@10']:.3f} |")
if bm25:
    print(f"| BM25 (bm25s, no model) | - | {bm25['ndcg@10']:.3f} |")
EOF
