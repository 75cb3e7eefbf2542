#!/usr/bin/env bash
# Rerankers against BM25 on SQuAD v1.1 dev split by article (issue 72): the first 24 articles'
# questions train (their paragraphs the corpus BM25 mines hard negatives from), the other 24
# articles' are the held-out retrieval set, which no step before the last reads.
#
#   bash bench/rerank_squad.sh [OUT] [MODEL...]   (default runs/rerank-squad; models:
#                                                   random-init tiny and any given runs)
#
# 1. the split; 2. `electra mine` on the training half: 7 negatives a question, BM25's best
# (EASY=R of them instead a seeded random choice of the paragraphs sharing a word with it),
# its last 300 groups the dev set that picks the epoch; 3. `finetune --task rerank`
# (listwise) from each model; 4. the fusion weight W (`evaluate --fusion`) chosen by nDCG@10
# on those 300 dev questions against the training half's paragraphs; 5. `evaluate --task
# rerank` on the held-out half: BM25's top TOP_K reordered, and fused at W, all scored.
# Each step skips what is there already; results in OUT/results.jsonl.
set -euo pipefail
OUT=${1:-runs/rerank-squad}
shift || true
MODELS=("$@")
SHARED=${SHARED:-../shared/data}
TOP_K=${TOP_K:-20}
EPOCHS=${EPOCHS:-2}
LENGTH=${LENGTH:-192}
EASY=${EASY:-0}
WEIGHTS=${WEIGHTS:-0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9}
mkdir -p "$OUT"

if [ ! -f "$OUT/test.json" ]; then
    python "$(dirname "$0")/squad_halves.py" "$SHARED/squad/dev-v1.1.json" "$OUT"
fi
if [ ! -f "$OUT/vocab/vocab.txt" ]; then
    mkdir -p "$OUT/vocab" && cp "$SHARED/vocab/bert-base-uncased-vocab.txt" "$OUT/vocab/vocab.txt"
fi
hard=$((7 - EASY))
[ -f "$OUT/groups.jsonl" ] || electra mine --data "$OUT/train.json" --out "$OUT/groups.jsonl" \
    --negatives "$hard" --quiet
if [ "$EASY" -gt 0 ] && [ ! -f "$OUT/mixed.jsonl" ]; then
    electra mine --data "$OUT/train.json" --out "$OUT/random.jsonl" --negatives \
        "$EASY" --sample random --skip-top "$hard" --range 2000 --quiet
    python - "$OUT" "$hard" <<'EOF2'
import json, sys
out, hard = sys.argv[1], int(sys.argv[2])
easy = {r["query"] + "\t" + r["positive"]: r for r in map(json.loads, open(f"{out}/random.jsonl"))}
with open(f"{out}/mixed.jsonl", "w", encoding="utf-8") as f:
    for r in map(json.loads, open(f"{out}/groups.jsonl")):
        e = easy.get(r["query"] + "\t" + r["positive"])
        if e is None:
            continue
        n = [r[f"negative_{i}"] for i in range(1, hard + 1)]
        n += [e[k] for k in sorted(e) if k.startswith("negative_")]
        f.write(json.dumps({"query": r["query"], "positive": r["positive"],
                            **{f"negative_{i + 1}": d for i, d in enumerate(n)}}) + "\n")
EOF2
fi
GROUPS_FILE=$OUT/groups.jsonl
[ "$EASY" -gt 0 ] && GROUPS_FILE=$OUT/mixed.jsonl
if [ ! -f "$OUT/dev.jsonl" ]; then
    n=$(wc -l < "$GROUPS_FILE")
    head -n $((n - 300)) "$GROUPS_FILE" > "$OUT/train.jsonl"
    tail -n 300 "$GROUPS_FILE" > "$OUT/dev.jsonl"
fi
if [ ! -f "$OUT/dev.json" ]; then  # the dev groups' questions against the training half
    python - "$OUT" <<'EOF2'
import json, sys
out = sys.argv[1]
keep = {json.loads(r)["query"] for r in open(f"{out}/dev.jsonl", encoding="utf-8")}
doc = json.load(open(f"{out}/train.json", encoding="utf-8"))
for article in doc["data"]:
    for p in article["paragraphs"]:
        p["qas"] = [q for q in p["qas"] if q["question"] in keep]
json.dump(doc, open(f"{out}/dev.json", "w", encoding="utf-8"))
EOF2
fi

finetune() {  # NAME, then the model flags
    local name=$1
    shift
    [ -f "$OUT/$name/results.json" ] || electra finetune "$@" --task rerank \
        --train "$OUT/train.jsonl" --dev "$OUT/dev.jsonl" --set max_length="$LENGTH" \
        --set batch_size=16 --set epochs="$EPOCHS" --set lr=5e-4 --out "$OUT/$name" --quiet \
        $( [ -d "$OUT/$name.partial" ] && echo --resume )
    [ -f "$OUT/$name/fusion.json" ] || electra evaluate --task rerank --model \
        "$OUT/$name/seed-1" --data "$OUT/dev.json" --top-k "$TOP_K" --fusion "$WEIGHTS" \
        --quiet | tail -1 > "$OUT/$name/fusion.json"
    w=$(python -c "import json, sys; r = json.load(open(sys.argv[1]))['rerank']; \
print(max(r['fused'], key=lambda f: f['ndcg@10'])['weight'])" "$OUT/$name/fusion.json")
    if ! grep -q "\"model\": \"$name\"" "$OUT/results.jsonl" 2>/dev/null; then
        start=$(date +%s)
        res=$(electra evaluate --task rerank --model "$OUT/$name/seed-1" --data "$OUT/test.json" \
            --top-k "$TOP_K" --fusion "$w" --quiet)
        python -c "import json, sys; r = json.loads(sys.argv[1])['rerank']; \
r['model'] = sys.argv[2]; r['seconds'] = int(sys.argv[3]); r['random_negatives'] = \
int(sys.argv[4]); print(json.dumps(r))" \
            "$res" "$name" $(( $(date +%s) - start )) "$EASY" >> "$OUT/results.jsonl"
    fi
}

finetune random-init --random-init tiny --tokenizer "$OUT/vocab"
for m in "${MODELS[@]}"; do
    finetune "$(basename "$m")" --model "$m"
done
cat "$OUT/results.jsonl"
