#!/usr/bin/env bash
# Issue 51 on any CPU in one command: builds the timed ranker when it is missing (build_cascade_ranker.sh), then
# bench_cascade.py per question (one Ranker.rank call per question, what a reranking service sees) and batched (one
# call for every question): as2hub's torch backends eager and compiled, padded and unpadded, full and with the cascade
# at drop 0.3 (chosen on dev, inference/CASCADE.md), as2hub ONNX int8, against every CrossEncoder configuration on the
# same weights (torch fp32, bf16 where the CPU has it, compiled, ONNX int8; batch 1/8/16/64), 1 thread, systems
# interleaved, best of 3 repeats, with MAP's paired 95% interval against the full model. Run it in the repository root:
#
#   AS2HUB_WIKIQA_DIR=... bash benchmarks/run_question_speed.sh [question|batched|both] [bench_cascade.py flags...]
#
# Writes benchmarks/results/cascade_<mode>_<cpu>${AS2HUB_RESULT_TAG}.json (cpu: amx, avx512 or avx2, from the CPU
# flags) and a log beside it in $AS2HUB_QUESTION_WORK (default /tmp/as2hub-question). Later flags override the
# defaults, e.g. `--backends torch-bf16 --repeats 2`. About an hour per mode with every backend on a 2-core machine,
# plus 40 minutes the first time for the ranker. Stop other jobs first: the figures are only as steady as the machine.
# PYTHON (default python3) runs it: an environment with as2hub[onnx] and sentence-transformers (the peer).
set -euo pipefail
cd "$(dirname "$0")/.."
MODES=${1:-both}
shift || true
case "$MODES" in
  question | batched) ;;
  both) MODES="question batched" ;;
  *) echo "usage: run_question_speed.sh [question|batched|both] [bench_cascade.py flags...]" >&2; exit 2 ;;
esac
[ -n "${AS2HUB_WIKIQA_DIR:-}" ] || { echo "error: set AS2HUB_WIKIQA_DIR to the WikiQA corpus folder" >&2; exit 2; }
PY=${PYTHON:-python3}
WORK=${AS2HUB_QUESTION_WORK:-/tmp/as2hub-question}
# The CPU kind names the results (as2hub's own reading of the CPU flags, as backend="auto" uses it)
CPU=$("$PY" -c 'from as2hub.inference.backends import cpu_features
flags = cpu_features().flags
print("amx" if "amx_bf16" in flags else "avx512" if "avx512f" in flags else "avx2")')
# oneDNN keeps a kernel per matrix shape; a pass over WikiQA meets more shapes than its default cache (1,024) holds.
export ONEDNN_PRIMITIVE_CACHE_CAPACITY=${ONEDNN_PRIMITIVE_CACHE_CAPACITY:-8192}
MODEL=$(PYTHON="$PY" bash benchmarks/build_cascade_ranker.sh "$WORK")
for MODE in $MODES; do
  PEERS=1,8,16,64
  [ "$MODE" = batched ] && PEERS=16,64  # one call for every pair: batch 1 and 8 only add calls
  NAME=cascade_${MODE}_${CPU}${AS2HUB_RESULT_TAG:-}
  "$PY" benchmarks/bench_cascade.py --model_dir "$MODEL" --mode "$MODE" --torch_compile --unpadded --drops 0.3 \
    --peer_batch_sizes "$PEERS" --threads 1 --repeats 3 --work_dir "$WORK/bench" \
    --results "benchmarks/results/$NAME.json" "$@" 2>&1 | tee "$WORK/$NAME.log"
done
