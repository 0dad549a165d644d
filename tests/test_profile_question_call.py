"""``benchmarks/profile_question_call.py --torch_backends``: a torch backend's call gets a per-operator profile (the
source of BACKENDS.md's "where bf16 time goes" on the AMX Xeon), beside the ONNX rows' session / tokenizer split."""

import os
import sys
from pathlib import Path

import pytest
from helpers import needs_onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

WIKIQA_DIR = Path(
    os.environ.get("AS2HUB_WIKIQA_DIR") or Path(__file__).parents[1].parent / "shared" / "data" / "wikiqa"
)


@pytest.mark.slow
@pytest.mark.wikiqa
@needs_onnx
def test_a_torch_backend_is_profiled_per_operator(tmp_path):
    if not (WIKIQA_DIR / "WikiQA-test.tsv.gz").is_file():
        pytest.skip(f"WikiQA corpus not found at {WIKIQA_DIR} (needs ../shared/data/wikiqa next to the project)")
    import profile_question_call

    report = profile_question_call.main(
        ["--questions", "3", "--repeats", "1", "--torch_backends", "torch", "--peer_batch_sizes", "4",
         "--work_dir", str(tmp_path / "work"), "--results", str(tmp_path / "profile.json")]
    )  # fmt: skip
    assert (tmp_path / "profile.json").is_file()
    operators = report["systems"]["as2hub torch"]["profile"]["torch_operators"]
    names = [op["operator"] for op in operators]
    assert "aten::addmm" in names  # the linear layers: the bulk of an encoder's work
    assert [op["self_cpu_s"] for op in operators] == sorted((op["self_cpu_s"] for op in operators), reverse=True)
    assert all(0 < op["share"] <= 1 and op["calls"] >= 1 for op in operators)
    assert sum(op["share"] for op in operators) <= 1 + 1e-9
    assert "torch_operators" not in report["systems"]["as2hub onnx-int8 @16"]["profile"]  # ONNX rows: the split only
