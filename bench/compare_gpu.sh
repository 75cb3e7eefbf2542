#!/bin/bash
# The CUDA path and the ELECTRA-Small-sized comparison, on one GPU, in <= 9 minutes.
# Nothing in tests or CI needs a GPU; this is what a session lent one runs (see the README).
#
#   bash bench/compare_gpu.sh [GLUE_DIR]     # GLUE_DIR holding SST-2/ (default: ../shared/data/glue)
#   SMOKE=1 bash bench/compare_gpu.sh        # a dry run of the script on CPU, tiny sizes
#
# 1. bench/gpu_check.py (~1 min): fp32 losses equal the CPU's within 1e-4 on one batch, a bf16
#    step, fused AdamW, ELECTRA-Small and -Base tokens/s and MFU.
# 2. torchrun with one GPU: a DDP and an FSDP2 pretraining run of 3 steps each.
# 3. electra compare: electra vs mlm, ELECTRA-Small's shape (12 x 256, generator 1/4), on the
#    demo's corpus (Python's docs, built here), 100 s of electra's GPU compute per objective,
#    kept at 50% and 100%, fine-tuned on SST-2 (20k examples) with 2 seeds, beside random init.
# The last line printed is one JSON object with every figure. Work goes to $OUT or /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
GLUE=${1:-../shared/data/glue}
WORK=${OUT:-/tmp}/compare_gpu
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$WORK"
t0=$(date +%s)

if [ -n "${SMOKE:-}" ]; then
  smoke=--smoke preset=tiny budget=20s sst=500 seeds=1 batch=16
else
  smoke="" preset=small budget=100s sst=20000 seeds=1,2 batch=128
fi
check=$($PY bench/gpu_check.py $smoke | tail -1)
echo "gpu_check: $check"

$PY -m electra demo --out "$WORK/demo" --steps 1 --quiet > "$WORK/demo.log"
DATA=$WORK/demo/data
dist='{}'
for mode in ddp fsdp; do
  if $PY -m torch.distributed.run --standalone --nproc_per_node 1 -m electra pretrain --preset $preset \
      --data "$DATA" --out "$WORK/$mode" --overwrite --quiet --set train.max_steps=3 \
      --set train.warmup_steps=1 --set train.eval_every=0 --set train.batch_size=32 \
      --set train.parallel=$mode > "$WORK/$mode.log" 2>&1; then
    loss=$(tail -1 "$WORK/$mode/metrics.jsonl" | $PY -c "import json,sys; print(json.load(sys.stdin)['loss'])")
  else
    loss='"failed"'; tail -3 "$WORK/$mode.log"
  fi
  dist=$($PY -c "import json,sys; d=json.loads(sys.argv[1]); d['$mode']=$loss; print(json.dumps(d))" "$dist")
done
echo "torchrun one GPU, loss after 3 steps: $dist"

tasks=""
if [ -d "$GLUE/SST-2" ]; then tasks="--tasks sst2:max_train_examples=$sst --glue $GLUE"; fi
if [ -n "$tasks" ]; then
  # shellcheck disable=SC2086
  $PY -m electra compare --data "$DATA" --preset $preset --set train.batch_size=$batch \
    --set train.warmup_steps=1000 --set train.max_steps=10000 --set train.eval_every=0 \
    --set train.save_every=100000 --objectives electra,mlm --budget $budget --fractions 0.5,1 \
    $tasks --seeds $seeds --out "$WORK/compare" --quiet > "$WORK/compare.log" 2>&1 \
    || tail -5 "$WORK/compare.log"
  cat "$WORK/compare/results.md" 2>/dev/null || true
else
  echo "no $GLUE/SST-2: the comparison is skipped (give GLUE_DIR)"
fi
$PY - "$check" "$dist" "$WORK/compare/results.json" "$t0" <<'PY'
import json, os, sys, time
check, dist, results, t0 = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
out = {"check": check, "torchrun_1gpu_loss": dist}
if os.path.exists(results):
    r = json.load(open(results))
    out["compare"] = {m["model"]: {"pretrain_flops": m["pretrain_flops"], "steps": m["steps"],
                                   **{t: s["median"] for t, s in m["tasks"].items()}}
                      for m in r["models"]}
out["seconds"] = round(time.time() - t0)
print(json.dumps(out))
PY
