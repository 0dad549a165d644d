#!/usr/bin/env bash
# The ranker that the per-question benchmarks time (issue 51), built the same way on a CPU or a GPU: all-MiniLM-L6-v2
# fine-tuned on WikiQA (the cpu_learn pairwise recipe, seed 45), then cascade heads after layers 2 and 4 distilled
# from its scores with the encoder frozen (`--cascade_heads_only --cascade_head_target distill`, the settings chosen on
# dev in inference/CASCADE.md). Run it in the repository root:
#
#   AS2HUB_WIKIQA_DIR=... bash benchmarks/build_cascade_ranker.sh WORK_DIR [LOG_DIR]   # prints WORK_DIR/heads
#
# About 40 minutes on one quiet CPU core, under a minute on a GPU. Nothing is rebuilt when WORK_DIR/heads holds a
# finished ranker; a run that fails leaves no WORK_DIR/heads behind (the fine-tuned ranker is kept for the next try).
# PYTHON (default python3) runs it; AS2HUB_MINILM_DIR, where set, names the MiniLM folder (else the pip package's).
set -euo pipefail
WORK=${1:?usage: build_cascade_ranker.sh WORK_DIR [LOG_DIR]}
LOGS=${2:-$WORK}
PY=${PYTHON:-python3}
mkdir -p "$WORK" "$LOGS"
if [ -f "$WORK/heads/config.json" ]; then
  echo "$WORK/heads"
  exit 0
fi
MINILM=${AS2HUB_MINILM_DIR:-$("$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); from bench_utils import minilm_path; print(minilm_path())')}
COMMON=(--dataset wikiqa --pairwise --per_device_eval_batch_size 64 --seed 45 --max_length 256 --overwrite_output_dir)
if [ ! -f "$WORK/ranker/config.json" ]; then
  rm -rf "$WORK/ranker.partial"
  "$PY" -m as2hub.run_scripts.run_as2 --model_name_or_path "$MINILM" --output_dir "$WORK/ranker.partial" \
    "${COMMON[@]}" --learning_rate 2e-5 --num_train_epochs 2 --per_device_train_batch_size 32 \
    --early_stopping_patience 2 --token_type_init scratch --save_strategy epoch --save_total_limit 2 \
    > "$LOGS/question_finetune.log" 2>&1 || { tail -20 "$LOGS/question_finetune.log" >&2; exit 1; }
  mv "$WORK/ranker.partial" "$WORK/ranker"
fi
rm -rf "$WORK/heads.partial"
"$PY" -m as2hub.run_scripts.run_as2 --model_name_or_path "$WORK/ranker" --output_dir "$WORK/heads.partial" \
  "${COMMON[@]}" --cascade_layers 2,4 --cascade_heads_only --cascade_head_target distill --learning_rate 2e-3 \
  --num_train_epochs 10 --per_device_train_batch_size 32 \
  > "$LOGS/question_heads.log" 2>&1 || { tail -20 "$LOGS/question_heads.log" >&2; exit 1; }
mv "$WORK/heads.partial" "$WORK/heads"
echo "$WORK/heads"
