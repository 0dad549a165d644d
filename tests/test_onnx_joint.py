"""ONNX export of joint multi-candidate models: one graph over the (k+1)·L slot layout, the torch scores through
``JointRanker(backend="onnx")``, int8, the cascade with both stages on ONNX Runtime."""

import pytest
import torch
from helpers import needs_onnx, spread
from transformers import AutoTokenizer

from as2hub.inference.joint_ranking import JointRanker
from as2hub.inference.onnx_export import export_onnx
from as2hub.inference.onnx_runtime import OnnxRankerModel, StaleOnnxExportError
from as2hub.inference.ranking import Ranker
from as2hub.modeling import CONTEXTUAL_MODELS, JointMultiCandidateModel
from as2hub.modeling.folders import GRAPH_FILES

pytestmark = needs_onnx

K, L = 3, 16
QUESTION = "What is a generator?"
CANDIDATES = [
    "A function that yields values lazily, one at a time.",
    "It is a kind of loop.",
    "Generators are iterators built by yield.",
    "No.",
    "The module reference describes the import statement and how modules are found in long detail " * 3,
    "A tuple is immutable.",
    "The with statement manages resources.",
]
FV_LABELS = {0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO"}


def saved_joint(stock_checkpoint, folder, backbone="bert", head="AE_k", seed=1, attention="all"):
    """A tiny joint model moved off its init, with its head scaled so that scores spread (a test where every score
    is 0.5 could not fail), saved in ``folder``."""
    source = stock_checkpoint(backbone)
    tokenizer = AutoTokenizer.from_pretrained(source)
    labels = {"id2label": FV_LABELS, "label2id": {v: k for k, v in FV_LABELS.items()}} if head.endswith("_1") else {}
    torch.manual_seed(0)
    model = JointMultiCandidateModel.from_pretrained(
        source,
        num_candidates=K,
        slot_length=L,
        head=head,
        pad_token_id=tokenizer.pad_token_id,
        first_token_attention=attention,
        **labels,
    ).eval()

    def score(m):  # only the *_k heads give per-candidate scores to spread
        if m.config.candidate_head:
            JointRanker(m, tokenizer).score(QUESTION, CANDIDATES)

    spread(model, score, seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


@pytest.mark.parametrize(
    ("backbone", "head", "attention"),
    [("bert", "AE_k", "all"), ("roberta", "IE_k", "all"), ("electra", "AE_k", "all"), ("bert", "AE_k", "own_slot")],
    ids=lambda v: str(v),
)
def test_joint_graph_scores_equal_torch_and_int8_stays_close(stock_checkpoint, tmp_path, backbone, head, attention):
    model, tokenizer = saved_joint(stock_checkpoint, tmp_path, backbone, head, attention=attention)
    paths = export_onnx(tmp_path, quantize="int8")
    assert paths["fp32"] == tmp_path / "onnx" / GRAPH_FILES[None] and paths["int8"].is_file()
    expected = JointRanker(model, tokenizer, batch_size=2).score(QUESTION, CANDIDATES)
    assert max(expected) - min(expected) > 0.2  # the scores spread: equality below is not about constants
    onnx_ranker = JointRanker.from_pretrained(tmp_path, backend="onnx", num_threads=1, batch_size=2)
    assert isinstance(onnx_ranker.model, OnnxRankerModel)
    got = onnx_ranker.score(QUESTION, CANDIDATES)  # 7 candidates: groups of 3, 3 and 1 (two empty slots)
    assert got == pytest.approx(expected, abs=1e-4)
    ranked = onnx_ranker.rank(QUESTION, CANDIDATES)
    assert [r.index for r in ranked] == [r.index for r in JointRanker(model, tokenizer).rank(QUESTION, CANDIDATES)]
    int8 = JointRanker.from_pretrained(tmp_path, backend="onnx", quantize="int8", num_threads=1).score(
        QUESTION, CANDIDATES
    )
    # per-token int8 on these joint models: at most 0.028 on a 0.73 spread (2026-11-26, Intel Xeon with AMX)
    assert int8 == pytest.approx(expected, abs=0.05) and int8 != pytest.approx(expected, abs=1e-6)

    import onnx

    graph = onnx.load(str(paths["fp32"]))
    shape = [d.dim_param or d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
    assert shape == ["batch", (K + 1) * L]  # one graph at (k+1)·L, dynamic batch
    ops = {node.op_type for node in onnx.load(str(paths["int8"])).graph.node}
    assert "MatMulIntegerToFloat" in ops and "QuantizeLinear" in ops and "DynamicQuantizeLinear" not in ops


def test_fact_verification_head_exports_label_probabilities(stock_checkpoint, tmp_path):
    model, tokenizer = saved_joint(stock_checkpoint, tmp_path, "bert", "AE_1")
    export_onnx(tmp_path)
    from as2hub.modeling.joint_multicandidate.joint_layout import SlotLayout

    layout = SlotLayout.from_tokenizer(tokenizer, K, L)
    batch = layout.batch([layout.encode_texts(tokenizer, "Hamlet is a comedy.", CANDIDATES[:2])])
    with torch.no_grad():
        expected = model(**batch).logits.softmax(-1)
    session = OnnxRankerModel.from_pretrained(tmp_path, num_threads=1)
    got = session.logits_to_scores(session(**batch).logits)
    assert got.shape == (1, len(FV_LABELS)) and torch.allclose(got, expected, atol=1e-4)


def test_cascade_runs_both_stages_on_onnx_runtime(stock_checkpoint, tmp_path):
    joint_dir, pairwise_dir = tmp_path / "joint", tmp_path / "pairwise"
    model, tokenizer = saved_joint(stock_checkpoint, joint_dir, "bert", "AE_k")
    source = stock_checkpoint("bert")
    torch.manual_seed(3)
    pairwise = CONTEXTUAL_MODELS["bert"][1].from_pretrained(source, contextual=False).eval()
    with torch.no_grad():
        for parameter in pairwise.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    pairwise.save_pretrained(pairwise_dir)
    AutoTokenizer.from_pretrained(source).save_pretrained(pairwise_dir)
    export_onnx(joint_dir)
    export_onnx(pairwise_dir)
    torch_cascade = JointRanker(model, tokenizer, pairwise=Ranker.from_pretrained(pairwise_dir))
    onnx_cascade = JointRanker.from_pretrained(joint_dir, pairwise=str(pairwise_dir), backend="onnx", num_threads=1)
    assert isinstance(onnx_cascade.pairwise.model, OnnxRankerModel)
    expected, got = torch_cascade.rank(QUESTION, CANDIDATES), onnx_cascade.rank(QUESTION, CANDIDATES)
    assert [(r.index, r.stage) for r in got] == [(r.index, r.stage) for r in expected]
    assert [r.score for r in got] == pytest.approx([r.score for r in expected], abs=1e-4)
    assert [r.stage for r in got].count("joint") == K


def test_a_retrained_joint_model_refuses_its_old_graph(stock_checkpoint, tmp_path):
    saved_joint(stock_checkpoint, tmp_path, "bert", "IE_k")
    export_onnx(tmp_path)
    saved_joint(stock_checkpoint, tmp_path, "bert", "IE_k", seed=2)  # new weights, old graph
    with pytest.raises(StaleOnnxExportError, match="as2hub-export-onnx"):
        JointRanker.from_pretrained(tmp_path, backend="onnx")


def test_graphs_exported_before_first_token_attention_existed_still_load(stock_checkpoint, tmp_path):
    import json

    import onnx

    from as2hub.inference.onnx_runtime import CONFIG_KEY

    def drop_the_field(graph_path):
        graph = onnx.load(str(graph_path))
        for prop in graph.metadata_props:
            if prop.key == CONFIG_KEY:
                recorded = json.loads(prop.value)
                del recorded["first_token_attention"]
                prop.value = json.dumps(recorded)
        onnx.save(graph, str(graph_path))

    model, tokenizer = saved_joint(stock_checkpoint, tmp_path, "bert", "AE_k")  # "all", as every older model
    drop_the_field(export_onnx(tmp_path)["fp32"])
    got = JointRanker.from_pretrained(tmp_path, backend="onnx", num_threads=1).score(QUESTION, CANDIDATES)
    assert got == pytest.approx(JointRanker(model, tokenizer).score(QUESTION, CANDIDATES), abs=1e-4)
    # The same old graph next to an own-slot config is stale: it was traced with full attention.
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "first_token_attention": "own_slot"}))
    with pytest.raises(StaleOnnxExportError, match="first_token_attention"):
        JointRanker.from_pretrained(tmp_path, backend="onnx")
