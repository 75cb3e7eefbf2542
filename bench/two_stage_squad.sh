#!/usr/bin/env bash
# A bi-encoder's two stages on SQuAD v1.1 dev split by article (issue 72), against BM25: the
# first 24 articles' questions and paragraphs train, the other 24 articles' 4,874 questions
# against their 1,019 paragraphs are held out (as rerank_squad.sh splits them).
#
#   bash bench/two_stage_squad.sh [OUT] [START]   (default runs/two-stage; START: a run or
#                                                   model to start from, default random-init tiny)
#
# Each row starts from START: as it is; stage 2 alone on (question, paragraph) pairs
# (in-batch negatives); stage 2 with one mined BM25 hard negative a question (`electra mine
# --format triplets`); stage 1 alone on 20,000 pairs of spans of the pretraining corpus
# (`electra pairs`, Contriever's crops); stage 1 then stage 2 with the mined negatives. Each
# scored on the held-out half (nDCG@10, BM25 beside it) and on STS-B dev (Spearman). The
# last 300 training questions are the dev set that picks nothing (select=last), read by no
# stage's training. Each step skips what is there already; results in OUT/results.jsonl.
set -euo pipefail
OUT=${1:-runs/two-stage}
START=${2:-}
SHARED=${SHARED:-../shared/data}
LENGTH=${LENGTH:-192}
mkdir -p "$OUT"

if [ ! -f "$OUT/test.json" ]; then
    python "$(dirname "$0")/squad_halves.py" "$SHARED/squad/dev-v1.1.json" "$OUT"
fi
if [ -z "$START" ]; then  # random-init tiny with BERT's vocabulary, saved once
    START=$OUT/random
    [ -f "$START/discriminator/model.safetensors" ] || python - "$SHARED" "$START" <<'EOF'
import shutil, sys
from pathlib import Path

import torch
from electra.data.tokenizer import load_tokenizer
from electra.model import Discriminator
from electra.model.bodies import model_preset
from electra.saved import folders
vocab = Path(sys.argv[2]) / "vocab"
vocab.mkdir(parents=True, exist_ok=True)
shutil.copy(Path(sys.argv[1]) / "vocab/bert-base-uncased-vocab.txt", vocab / "vocab.txt")
tok = load_tokenizer(vocab)
torch.manual_seed(0)
folders.save(Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size())),
             "discriminator", Path(sys.argv[2]) / "discriminator", tok)
EOF
fi
if [ ! -f "$OUT/pairs.jsonl" ]; then  # (question, its paragraph); the last 300 the dev set
    python - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
doc = json.load(open(f"{out}/train.json", encoding="utf-8"))
rows = [{"query": q["question"], "positive": p["context"]}
        for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
for name, part in (("pairs", rows[:-300]), ("dev", rows[-300:])):
    with open(f"{out}/{name}.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in part)
EOF
fi
[ -f "$OUT/triplets.jsonl" ] || electra mine --data "$OUT/pairs.jsonl" --out "$OUT/triplets.jsonl" \
    --negatives 1 --format triplets --quiet
[ -f "$OUT/corpus-pairs.jsonl" ] || electra pairs --input "$SHARED"/corpus/train/*.txt \
    --out "$OUT/corpus-pairs.jsonl" --max-pairs 20000 --quiet

finetune() {  # NAME FROM TRAIN EPOCHS
    [ -f "$OUT/$1/seed-1/model.safetensors" ] || electra finetune --model "$2" --task embedding \
        --train "$3" --dev "$OUT/dev.jsonl" --set epochs="$4" --set max_length="$LENGTH" \
        --set batch_size=32 --out "$OUT/$1" --quiet $( [ -d "$OUT/$1.partial" ] && echo --resume )
}
score() {  # NAME MODEL
    grep -q "\"row\": \"$1\"" "$OUT/results.jsonl" 2>/dev/null && return 0
    sts=$(electra evaluate --model "$2" --task sts --data "$SHARED/glue/STS-B" --quiet | tail -1)
    ret=$(electra evaluate --model "$2" --task retrieval --data "$OUT/test.json" --quiet | tail -1)
    echo "{\"row\": \"$1\", \"start\": \"$START\", \"sts\": $sts, \"retrieval\": $ret}" >> "$OUT/results.jsonl"
}
score "as it is" "$START"
finetune stage2-pairs "$START" "$OUT/pairs.jsonl" 2
score "stage 2: pairs" "$OUT/stage2-pairs/seed-1"
finetune stage2-mined "$START" "$OUT/triplets.jsonl" 2
score "stage 2: pairs + a mined negative" "$OUT/stage2-mined/seed-1"
finetune stage1 "$START" "$OUT/corpus-pairs.jsonl" 1
score "stage 1: corpus spans" "$OUT/stage1/seed-1"
finetune stage1-stage2 "$OUT/stage1/seed-1" "$OUT/triplets.jsonl" 2
score "stage 1, then stage 2 with mined negatives" "$OUT/stage1-stage2/seed-1"
python - "$OUT/results.jsonl" <<'EOF'
import json, sys
print("| row | STS-B Spearman | SQuAD held-out nDCG@10 |\n|---|---|---|")
bm25 = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    ret = next(iter(r["retrieval"].values()))
    bm25 = ret.get("bm25", bm25)
    print(f"| {r['row']} | {r['sts']['dev']['spearman']:.3f} | {ret['ndcg@10']:.3f} |")
if bm25:
    print(f"| BM25 (bm25s, no model) | - | {bm25['ndcg@10']:.3f} |")
EOF
