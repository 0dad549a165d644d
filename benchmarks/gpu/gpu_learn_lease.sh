#!/usr/bin/env bash
# One GPU lease that runs one gpu_learn objective group (issues 48 and 49): the group's continued pre-trainings side
# by side, then each one's 5 pre-registered fine-tuning seeds, 3 at a time, beside the group's baseline seeds.
#
#   bash benchmarks/gpu/gpu_learn_lease.sh ssp     # 001: pairwise_ssp, its MLM-only control pairwise_mlm, pairwise
#   AS2HUB_LEASE_PARALLEL=4 bash benchmarks/gpu/gpu_learn_lease.sh dslc   # 000: contextual_dslc, contextual_dpc,
#                                                  # contextual_mlm, contextual
#   bash benchmarks/gpu/gpu_learn_lease.sh mspp    # 004: mspp and mspp_own_slot with their cascades, the MLM-only
#                                                  # control joint_mlm, joint_all and joint_own_slot
#
# A pre-trained folder cannot come back through $OUT, so a group's pre-training and its fine-tunings share one lease.
# Each pre-trained system first runs alone with seed 42 (the pre-training, then one fine-tuning); when its results JSON
# records the pre-training done, more invocations (AS2HUB_LEASE_PARALLEL, default 2), each with its own output root,
# read it (--state_from) and fine-tune the other seeds from the same folder. Every invocation stops before the lease's deadline
# (AS2HUB_LEASE_SECONDS, default 560 s from the start) and keeps what finished: call the same command again on the
# still-warm machine and each one continues from its output root's state.json.
#
# Here:  AS2HUB_GPU_CARRY=.gpu_carry_minilm bash benchmarks/gpu/prepare_carry.sh --minilm   (the corpus travels)
# Then:  run(command="bash benchmarks/gpu/gpu_learn_lease.sh ssp", carry=[".gpu_carry_minilm"], timeout_s=600)
# What comes back: machine.txt and gpu_learn_<group>.tgz (every results JSON and log). Merge it here:
#   tar xzf gpu_learn_ssp.tgz -C /tmp/gl && python benchmarks/reproduce.py --table 001 --scale gpu_learn \
#     --systems pairwise,pairwise_ssp,pairwise_mlm --state_from /tmp/gl/<each JSON> --merge_weights 554d22e4 \
#     --results benchmarks/results/reproduce_as2_pretraining_gpu_learn.json --stop_after_s 0
# (--merge_weights: the carried MiniLM is rounded through fp16 once; every run of a group starts from those bytes.)
set -uo pipefail
cd "$(dirname "$0")/../.."
GROUP=${1:?usage: gpu_learn_lease.sh ssp|dslc|mspp}
case "$GROUP" in
  ssp) TABLE=001 NAME=as2_pretraining PRETRAINED="pairwise_ssp pairwise_mlm" BASELINES=pairwise ;;
  dslc) TABLE=000 NAME=as2_pretraining PRETRAINED="contextual_dslc contextual_dpc contextual_mlm" BASELINES=contextual ;;
  mspp) TABLE=004 NAME=joint PRETRAINED="mspp+cascade mspp_own_slot+cascade_mspp_own_slot joint_mlm"
    BASELINES=joint_all,joint_own_slot ;;
  *) echo "error: unknown group $GROUP (ssp, dslc, mspp)" >&2; exit 2 ;;
esac
export OUT=${OUT:-/tmp/as2hub_gpu_out} AS2HUB_GPU_CARRY=${AS2HUB_GPU_CARRY:-.gpu_carry_minilm}
# AS2HUB_LEASE_SCALE=smoke tries the lease's steps on any machine in a few minutes (tests/test_gpu_kit.py).
export AS2HUB_REPRODUCE_SCALE=${AS2HUB_LEASE_SCALE:-gpu_learn}
START=$(date +%s)
DEADLINE=$((START + ${AS2HUB_LEASE_SECONDS:-560}))
PART=${AS2HUB_LEASE_PART:-benchmarks/gpu/run_gpu_session.sh}  # another part runner: a dry run of this script
LOGS=$(mktemp -d /tmp/lease_$GROUP.XXXX)
SEEDS=${AS2HUB_LEASE_SEEDS:-42,43,44,45,46}
# Invocations for the seeds after the first, side by side (2: 43,45 and 44,46; the contextual groups, whose
# fine-tunings take ~3x a pairwise one, fit one call better with 4).
PARALLEL=${AS2HUB_LEASE_PARALLEL:-2}
mkdir -p "$OUT" "$LOGS"

left() { echo $((DEADLINE - $(date +%s))); }

# At cpu_learn the lease continues the committed CPU table: the CPU's runs (the pip package's weights, 53aa5117) count
# as done there too, so that no finished CPU seed runs again on the GPU from the rounded weights and replaces its record
# in the merge (a pre-training still runs again: its folder is not here, and the record says which run each seed used).
MERGE=()
[ "$AS2HUB_REPRODUCE_SCALE" = cpu_learn ] && MERGE=(--merge_weights 53aa5117)

# One reproduce.py invocation through run_gpu_session.sh, with its own tag (results file and output root) and the
# time left to the lease's deadline.
invoke() {  # TAG SYSTEMS SEEDS [FLAGS...]
  local tag=$1 systems=$2 seeds=$3
  shift 3
  AS2HUB_RUN_TAG=$tag AS2HUB_GPU_PART_SECONDS=$(left) bash "$PART" reproduce "$TABLE" --systems "$systems" \
    --seed_list "$seeds" --threads 3 "${MERGE[@]}" "$@" > "$LOGS/$tag.txt" 2>&1
}

run_pretrained() {  # SYSTEM[+SYSTEM...]: the pre-training and seed 42, then the other seeds in two invocations
  local system=${1%%+*} systems=${1//+/,} first rest
  first=${SEEDS%%,*}
  rest=${SEEDS#*,}
  invoke "$system" "$systems" "$first"
  local state="$OUT/reproduce_${NAME}_${AS2HUB_REPRODUCE_SCALE}_$system.json"
  python3 - "$state" <<'EOF' || { echo "$system: the pre-training did not finish in this call; call again" >> "$LOGS/$system.txt"; return; }
import json, sys
state = json.load(open(sys.argv[1]))
sys.exit(0 if all(r.get("status") == "done" for r in state.get("pretraining", {}).values()) else 1)
EOF
  [ "$(left)" -gt 120 ] || { echo "$system: no time left for seeds $rest; call again" >> "$LOGS/$system.txt"; return; }
  # The other seeds in PARALLEL invocations (round robin), tagged a, b, c, ...
  local -a parts=()
  local i=0 seed
  for seed in ${rest//,/ }; do
    parts[i % PARALLEL]="${parts[i % PARALLEL]:+${parts[i % PARALLEL]},}$seed"
    i=$((i + 1))
  done
  local letters=abcdefgh
  for i in "${!parts[@]}"; do
    invoke "${system}_${letters:i:1}" "$systems" "${parts[i]}" --state_from "$state" &
  done
  wait
}

for system in $PRETRAINED; do
  run_pretrained "$system" &
done
invoke base "$BASELINES" "$SEEDS" &
wait

# At most 8 files come back: machine.txt and one archive with every JSON and log.
rm -f "$OUT"/*.md
( cd "$OUT" && tar czf "${AS2HUB_REPRODUCE_SCALE}_$GROUP.tgz" $(ls *.json *.log 2> /dev/null) -C "$LOGS" . ) && rm -f "$OUT"/*.json "$OUT"/*.log
ls -la "$OUT"
for f in "$LOGS"/*.txt; do echo "== $f"; grep -h -E "=== |exit code|Error|error:|; call again$" "$f" | tail -n 12; done
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv 2> /dev/null
echo "lease took $(( $(date +%s) - START )) s"
# The last line says whether the group is complete; a later call on the warm machine continues each output root (the
# machine goes back after 30 s idle, and the pre-trained folders with it: call again at once).
unfinished=$(grep -h -E "; call again$" "$LOGS"/*.txt | cut -d: -f1 | sort -u | paste -s -d' ')
grep -q -h "exit code 3 " "$LOGS"/*.txt && unfinished="${unfinished:+$unfinished, }a reproduce.py invocation stopped at its deadline"
if [ -n "$unfinished" ]; then
  echo "NOT FINISHED: $unfinished: call the same command again at once, on the warm machine"
else
  echo "group $GROUP complete"
fi
