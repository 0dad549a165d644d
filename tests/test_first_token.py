"""The last layer computed for the first token only (``as2hub.modeling.first_token``): the same logits as the full
model on every backbone, contextual and pairwise, eager and SDPA attention, padded batches; the model is restored
after the block; models whose head reads more than the first token are left alone; the exported ONNX graph carries
the shortcut and still matches the full model."""

import pytest
import torch
from helpers import BACKBONES, needs_onnx
from test_backends import spread_tiny_ranker
from test_onnx_joint import saved_joint
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from as2hub.inference.ranking import Ranker
from as2hub.modeling.first_token import first_token_last_layer
from as2hub.modeling.segment_layout import pad_batch

QUESTIONS = ["who wrote hamlet?", "where is the capital of france and why", "hamlet?"]
CANDIDATES = ["Shakespeare wrote it around 1600 in London.", "Paris.", "It is a play by an English writer."]


def padded_batch(tokenizer):
    batch = tokenizer(QUESTIONS, CANDIDATES, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any(), "the check needs padding"
    return batch


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_first_token_logits_equal_the_full_models(stock_checkpoint, tmp_path, backbone, contextual, attention):
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path / "m", backbone, contextual, export=False)
    model = AutoModelForSequenceClassification.from_pretrained(
        folder, trust_remote_code=True, attn_implementation=attention
    ).eval()
    batch = padded_batch(AutoTokenizer.from_pretrained(folder))
    with torch.inference_mode():
        full = model(**batch).logits
        with first_token_last_layer(model) as applied:
            fast = model(**batch).logits
            hidden = model.base_model(**batch).last_hidden_state
        after = model(**batch).logits
    assert applied and hidden.shape[1] == 1  # the shortcut really ran
    assert full.std() > 0.01, f"degenerate check: the logits do not spread: {full}"
    torch.testing.assert_close(fast, full, atol=1e-5, rtol=1e-4)
    assert torch.equal(after, full) and "forward" not in model.base_model.encoder.layer[-1].__dict__


def test_models_that_read_more_than_the_first_token_run_unchanged(stock_checkpoint, tmp_path):
    joint, tokenizer = saved_joint(stock_checkpoint, tmp_path / "joint", "bert", "AE_k")
    with first_token_last_layer(joint.eval()) as applied:
        assert not applied
    stock = AutoModelForSequenceClassification.from_pretrained(stock_checkpoint("bert"), num_labels=1)
    with first_token_last_layer(stock) as applied:
        assert not applied


def test_a_joint_model_built_in_memory_from_a_contextual_folder_runs_unchanged(stock_checkpoint, tmp_path):
    """Such a model keeps the contextual folder's config (``config.model_type`` says ``contextual_bert``) but its
    heads read the slot tokens: the shortcut follows the class, so it is not applied and the logits stay the full
    model's."""
    from as2hub.modeling import JointMultiCandidateModel
    from as2hub.modeling.joint_multicandidate.joint_layout import SlotLayout

    folder = spread_tiny_ranker(stock_checkpoint, tmp_path / "ctx", "bert", True, export=False)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    joint = JointMultiCandidateModel.from_pretrained(folder, num_candidates=3, slot_length=16, head="AE_k").eval()
    assert joint.config.model_type == "contextual_bert"  # the situation of the defect (issue 30, item 7)
    layout = SlotLayout.from_tokenizer(tokenizer, 3, 16)
    batch = layout.batch([layout.encode_texts(tokenizer, QUESTIONS[0], CANDIDATES)])
    with torch.inference_mode():
        full = joint(**batch).logits
        with first_token_last_layer(joint) as applied:
            inside = joint(**batch).logits
    assert not applied
    assert torch.equal(inside, full)


def test_ranker_scores_equal_the_full_models_probabilities(stock_checkpoint, tmp_path):
    """The Ranker (length-sorted padded batches, first-token last layer) against the full model, one unpadded pair
    at a time."""
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path / "m", "roberta", True, export=False)
    ranker = Ranker.from_pretrained(folder, batch_size=2)
    contexts = ["some context", "", "more context here"]
    got = ranker.score_pairs(QUESTIONS, CANDIDATES, contexts)
    model, tokenizer = ranker.model, ranker.tokenizer
    expected = []
    with torch.inference_mode():
        for texts in zip(QUESTIONS, CANDIDATES, contexts):
            segments = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
            row = ranker.layout.build(segments, ranker.max_length, model.config.type_vocab_size)
            logits = model(**pad_batch([row], ranker.layout.pad_token_id, None)).logits
            expected.append(model.logits_to_scores(logits).item())
    assert max(expected) - min(expected) > 0.01, f"degenerate check: {expected}"
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=0)


@needs_onnx
def test_exported_graph_computes_the_last_feed_forward_for_the_first_token(stock_checkpoint, tmp_path):
    import onnx
    import onnxruntime as ort

    folder = spread_tiny_ranker(stock_checkpoint, tmp_path / "m", "bert", False, export=False)
    from as2hub.inference.onnx_export import export_onnx

    paths = export_onnx(folder)  # checks the graph's scores against the full torch model's
    graph = onnx.load(str(paths["fp32"]))
    last_erf = [node for node in graph.graph.node if node.op_type == "Erf"][-1]  # GELU of the last feed-forward
    graph.graph.output.append(onnx.helper.make_tensor_value_info(last_erf.output[0], onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    batch = padded_batch(AutoTokenizer.from_pretrained(folder))
    feed = {name.name: batch[name.name].numpy() for name in session.get_inputs()}
    logits, last_ffn = session.run(None, feed)
    assert last_ffn.shape[:2] == (len(QUESTIONS), 1)
    full = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.inference_mode():
        expected = full(**batch).logits.numpy()
    assert abs(logits - expected).max() < 1e-4


def test_nested_blocks_leave_the_model_as_they_found_it(stock_checkpoint, tmp_path):
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path / "m", "bert", False, export=False)
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    layer = model.base_model.encoder.layer[-1]
    batch = padded_batch(AutoTokenizer.from_pretrained(folder))
    with torch.inference_mode(), first_token_last_layer(model):
        with first_token_last_layer(model) as inner:
            assert inner
        assert "forward" in layer.__dict__  # the inner block did not undo the outer one
        assert model.base_model(**batch).last_hidden_state.shape[1] == 1
    assert "forward" not in layer.__dict__
