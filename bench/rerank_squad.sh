#!/usr/bin/env bash
# Rerankers against BM25 on SQuAD v1.1 dev split by article (issue 72): the first 24 articles'
# questions train (their paragraphs the corpus BM25 mines hard negatives from), the other 24
# articles' are the held-out retrieval set, which no step before the last reads.
#
#   bash bench/rerank_squad.sh [OUT] [MODEL...]   (default runs/rerank-squad; models:
#                                                   random-init tiny and any given runs)
#
# 1. the split; 2. `electra mine` (BM25, 7 negatives a question) on the training half, its last
# 300 groups the dev set that picks the epoch; 3. `finetune --task rerank` (listwise) from each
# model; 4. `evaluate --task rerank` on the held-out half: BM25's top TOP_K reordered, both
# stages scored. Each step skips what is there already; results in OUT/results.jsonl.
set -euo pipefail
OUT=${1:-runs/rerank-squad}
shift || true
MODELS=("$@")
SHARED=${SHARED:-../shared/data}
TOP_K=${TOP_K:-20}
EPOCHS=${EPOCHS:-2}
LENGTH=${LENGTH:-192}
mkdir -p "$OUT"

if [ ! -f "$OUT/test.json" ]; then
    python - "$SHARED/squad/dev-v1.1.json" "$OUT" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1], encoding="utf-8"))
half = len(doc["data"]) // 2
for name, part in (("train", doc["data"][:half]), ("test", doc["data"][half:])):
    with open(f"{sys.argv[2]}/{name}.json", "w", encoding="utf-8") as f:
        json.dump({"version": doc["version"], "data": part}, f)
EOF
fi
if [ ! -f "$OUT/vocab/vocab.txt" ]; then
    mkdir -p "$OUT/vocab" && cp "$SHARED/vocab/bert-base-uncased-vocab.txt" "$OUT/vocab/vocab.txt"
fi
[ -f "$OUT/groups.jsonl" ] || electra mine --data "$OUT/train.json" --out "$OUT/groups.jsonl" \
    --negatives 7 --quiet
if [ ! -f "$OUT/dev.jsonl" ]; then
    n=$(wc -l < "$OUT/groups.jsonl")
    head -n $((n - 300)) "$OUT/groups.jsonl" > "$OUT/train.jsonl"
    tail -n 300 "$OUT/groups.jsonl" > "$OUT/dev.jsonl"
fi

finetune() {  # NAME, then the model flags
    local name=$1
    shift
    [ -f "$OUT/$name/results.json" ] || electra finetune "$@" --task rerank \
        --train "$OUT/train.jsonl" --dev "$OUT/dev.jsonl" --set max_length="$LENGTH" \
        --set batch_size=16 --set epochs="$EPOCHS" --set lr=5e-4 --out "$OUT/$name" --quiet \
        $( [ -d "$OUT/$name.partial" ] && echo --resume )
    if ! grep -q "\"model\": \"$name\"" "$OUT/results.jsonl" 2>/dev/null; then
        start=$(date +%s)
        res=$(electra evaluate --task rerank --model "$OUT/$name/seed-1" --data "$OUT/test.json" \
            --top-k "$TOP_K" --quiet)
        python -c "import json, sys; r = json.loads(sys.argv[1])['rerank']; \
r['model'] = sys.argv[2]; r['seconds'] = int(sys.argv[3]); print(json.dumps(r))" \
            "$res" "$name" $(( $(date +%s) - start )) >> "$OUT/results.jsonl"
    fi
}

finetune random-init --random-init tiny --tokenizer "$OUT/vocab"
for m in "${MODELS[@]}"; do
    finetune "$(basename "$m")" --model "$m"
done
cat "$OUT/results.jsonl"
