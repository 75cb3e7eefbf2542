#!/usr/bin/env bash
# The comparison in docs/results/compare.md: ELECTRA-Small's recipe at 6e14 training FLOPs an
# objective (30x the demo's) on ../shared/data's corpus, RTD with and without the 30 -> 15%
# mask-rate schedule, BERT's MLM, and Fast-ELECTRA (a frozen, small MLM as the generator),
# each fine-tuned on SST-2 (8,000 rows), MRPC, STS-B and a QNLI subset (3 epochs) with 3 seeds, with
# zero-shot STS-B and SQuAD retrieval; random init as the control.
#
#   bash bench/compare_result.sh [OUT]        (default runs/compare-6e14)
#
# Every step skips what is there already, and `electra compare` continues an interrupted
# comparison when run again: rerun this script to go on (after Ctrl-C, or in a new session).
#
# It outlives its machine through CARRY (default bench/results/compare-6e14, committed): the
# tokenizer, the frozen generator, and the comparison's small files (compare.json, each
# model's config and tokenizer, every finished fine-tune's results.json, each pretraining's
# metrics). They are copied into OUT at the start and back when the script ends (at its end,
# Ctrl-C or SIGTERM; `bash bench/compare_result.sh OUT --save` copies them while it runs). On a fresh machine
# the data is prepared again with the carried tokenizer, and every objective whose
# fine-tunes are all done is not pretrained again.
set -euo pipefail
OUT=${1:-runs/compare-6e14}
CARRY=${CARRY:-bench/results/compare-6e14}

save() {  # OUT's small files -> CARRY (no checkpoints; no weights but the frozen generator's)
    mkdir -p "$CARRY"
    [ -f "$OUT/tok/tokenizer.json" ] && mkdir -p "$CARRY/tok" && cp -p "$OUT"/tok/* "$CARRY/tok/"
    if [ -f "$OUT/generator-mlm/generator/model.safetensors" ]; then  # fast_electra's (6.7 MB)
        (cd "$OUT" && find generator-mlm -maxdepth 2 -type f ! -path "*/tb/*" ! -path "*/checkpoints/*" \
            ! -path "*/discriminator/*") |
            while read -r f; do mkdir -p "$CARRY/$(dirname "$f")" && cp -p "$OUT/$f" "$CARRY/$f"; done
    fi
    mkdir -p "$CARRY/metrics"  # each pretraining's metrics, where no run folder expects them
    for m in "$OUT"/compare/pretrain/*/metrics.jsonl; do
        [ -f "$m" ] && cp -p "$m" "$CARRY/metrics/$(basename "$(dirname "$m")").jsonl"
    done
    [ -d "$OUT/compare" ] || return 0
    (cd "$OUT/compare" && find . -type f \( -path "./*.json" ! -path "./*/*" -o -path "./results.*" \
        -o -path "./compare.png" -o -path "./finetune/*/*/results.json" \
        -o -path "./models/*/discriminator/*" ! -name "*.safetensors" \)) |
        while read -r f; do
            mkdir -p "$CARRY/compare/$(dirname "$f")" && cp -p "$OUT/compare/$f" "$CARRY/compare/$f"
        done
    echo "compare_result: the small files of $OUT are in $CARRY (commit them to keep them)"
}
if [ "${2:-}" = "--save" ]; then save; exit 0; fi
mkdir -p "$OUT"
if [ -d "$CARRY" ]; then  # what earlier sessions finished (never over what OUT holds)
    cp -rn "$CARRY/." "$OUT/"
fi
trap save EXIT
trap 'exit 143' TERM  # (bash waits out a child otherwise; the EXIT trap then saves)
SHARED=${SHARED:-../shared/data}
BUDGET=${BUDGET:-6e14}
GEN_BUDGET_STEPS=${GEN_BUDGET_STEPS:-1070}  # 1e14 FLOPs of the 64-wide MLM at batch 128

# 1. An 8,192-token WordPiece vocabulary and 128-token rows of the corpus (the heldout files
#    as the validation split).
[ -f "$OUT/tok/tokenizer.json" ] || electra tokenizer train --input "$SHARED"/corpus/train/*.txt \
    --vocab-size 8192 --out "$OUT/tok"
[ -f "$OUT/data/meta.json" ] || electra prepare --input "$SHARED"/corpus/train/*.txt \
    --val-input "$SHARED"/corpus/heldout/*.txt --tokenizer "$OUT/tok" --seq-len 128 \
    --workers 2 --out "$OUT/data"

# 2. A QNLI subset: GLUE's QNLI has no train split here, so its dev set (5,463 pairs) is cut,
#    shuffled with seed 0, into 4,000 pairs to train on and 1,463 to score.
if [ ! -f "$OUT/qnli/dev.tsv" ]; then
    mkdir -p "$OUT/qnli"
    python - "$SHARED/glue/QNLI/dev.tsv" "$OUT/qnli" <<'EOF'
import csv, random, sys
rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8"), delimiter="\t",
                           quoting=csv.QUOTE_NONE))
random.Random(0).shuffle(rows)
for name, part in (("train", rows[:4000]), ("dev", rows[4000:])):
    with open(f"{sys.argv[2]}/{name}.tsv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        w.writerow(["question", "sentence", "label"])
        w.writerows([r["question"], r["sentence"], r["label"]] for r in part)
EOF
fi

# 3. Fast-ELECTRA's generator: an existing MLM of the generator's shape (ELECTRA-Small's
#    1/4 width: 64 wide, 12 blocks), pretrained first on the same data for ~1e14 FLOPs
#    (reported beside the table, not in the objectives' budgets, as the paper's is); carried
#    with its weights, as compare reads it to plan every time.
[ -f "$OUT/generator-mlm/generator/model.safetensors" ] ||
    electra pretrain --preset small \
    --data "$OUT/data" --out "$OUT/generator-mlm" --resume --quiet \
    --set objective.kind=mlm --set model.hidden_size=64 --set model.num_heads=1 \
    --set model.intermediate_size=256 --set train.max_steps="$GEN_BUDGET_STEPS" \
    --set train.warmup_steps=50

# 4. The comparison (fast_electra's temperature falls 2 -> 1 over its ~571 steps), one
#    objective after another, each fine-tuned before the next is pretrained; fast_electra
#    second, while the generator trained above is here. A checkpoint every 50 steps: an
#    interruption on this machine loses at most that much. STS-B is fine-tuned 3 epochs, as
#    every task here, not the paper's 10 (70 minutes a model on 2 cores instead of 21).
electra compare --data "$OUT/data" --preset small --set train.save_every=50 \
    --budget "$BUDGET" --fractions 1 \
    --objectives "electra:mask_prob=0.3:mask_prob_end=0.15:name=electra-30to15,fast_electra:generator=$OUT/generator-mlm:temperature=2:temperature_end=1:temperature_steps=571,mlm,electra" \
    --tasks "sst2:max_train_examples=8000,mrpc,stsb:epochs=3,custom:name=qnli4k:train=$OUT/qnli/train.tsv:dev=$OUT/qnli/dev.tsv:text=question+sentence:label=label,sts,retrieval:data=$SHARED/squad/dev-v1.1.json" \
    --glue "$SHARED/glue" --seeds 1,2,3 --out "$OUT/compare"
