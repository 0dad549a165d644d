#!/usr/bin/env bash
# One GPU lease that continues the cpu_learn reproduction tables (issue 32) on the GPU, four invocations side by side
# (the models are small: one H100 runs them together, each with 3 CPU threads for its data):
#   1. 004: joint_all and joint_own_slot, seeds 43 and 44
#   2. 003: lambda_0 and lambda_qe, seeds 43 and 44
#   3. calibration, not merged: 004 joint_own_slot seed 42 again (the CPU's run: test MAP 64.00)
#   4. calibration, not merged: 001 pairwise seed 42 again (the CPU's run: test MAP 69.35; pairwise seeds spread 0.2)
# The two calibrations say whether the device (fp32 on the GPU, TF32 off: PyTorch's default) and the carried weights
# (all-MiniLM-L6-v2 rounded through fp16 once, to fit the 64 MiB carry; every record keeps its weights' digest) move
# a result by more than the seeds do.
#
# Here:  AS2HUB_PYDOC_CORPUS=/nonexistent AS2HUB_GPU_CARRY=.gpu_carry_minilm bash benchmarks/gpu/prepare_carry.sh --minilm
# Then:  run(command="bash benchmarks/gpu/cpu_learn_lease.sh", carry=[".gpu_carry_minilm"], timeout_s=600)
# Back here, merge each table's JSON with a nothing-to-run invocation:
#   python benchmarks/reproduce.py --table 004 --scale cpu_learn --systems joint_all,joint_own_slot --seed_list 43,44 \
#     --state_from <the JSON that came back>
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/as2hub_gpu_out} AS2HUB_GPU_CARRY=${AS2HUB_GPU_CARRY:-.gpu_carry_minilm}
export AS2HUB_REPRODUCE_SCALE=cpu_learn AS2HUB_GPU_PART_SECONDS=${AS2HUB_GPU_PART_SECONDS:-500}
part=benchmarks/gpu/run_gpu_session.sh
mkdir -p "$OUT" /tmp/lease
bash "$part" reproduce 004 --systems joint_all,joint_own_slot --seed_list 43,44 --threads 3 > /tmp/lease/joint.txt 2>&1 &
bash "$part" reproduce 003 --seed_list 43,44 --threads 3 > /tmp/lease/qe.txt 2>&1 &
AS2HUB_RUN_TAG=calib bash "$part" reproduce 004 --systems joint_own_slot --seed_list 42 --rerun joint_own_slot \
  --threads 3 > /tmp/lease/calib_joint.txt 2>&1 &
AS2HUB_RUN_TAG=calib bash "$part" reproduce 001 --systems pairwise --seed_list 42 --rerun pairwise \
  --threads 3 > /tmp/lease/calib_pairwise.txt 2>&1 &
wait
# At most 8 files come back: the JSONs, machine.txt and the logs in one archive.
rm -f "$OUT"/*.md
tar czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls *.log) -C /tmp/lease . && rm -f "$OUT"/*.log
ls -la "$OUT"
for f in /tmp/lease/*.txt; do echo "== $f"; grep -h -E "=== |exit code|Error|error:" "$f" | tail -n 12; done
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv
