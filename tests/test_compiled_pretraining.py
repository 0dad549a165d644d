"""``torch.compile`` of the pre-training models (``--torch_compile``): the forward is one graph (no graph break) for
every SSP family and the joint MSPP model, padded or unpadded; with the run script's collator every training batch
has one shape, so the step compiles once and computes the eager losses and gradients.

The one-graph checks trace with dynamo only (``torch._dynamo.explain``, seconds). The compiled steps run inductor,
whose first compile takes minutes on a loaded 2-core machine (C++ kernels; seconds from its on-disk cache): slow.
"""

import random
from types import SimpleNamespace

import pytest
import torch
from test_ssp_models import tiny
from test_unpadded import GRADIENT_CLOSE, joint_batch, joint_model, run, ssp_batch
from torch._dynamo.testing import CompileCounterWithBackend
from varlen_stand_ins import varlen_backward_stand_in, varlen_forward_stand_in

from as2hub.data_collators import generate_examples, load_documents, resolve_objective
from as2hub.modeling.ssp_pretraining import BertForSSPPretraining, ElectraForSSPPretraining, RobertaForSSPPretraining
from as2hub.run_scripts import run_pretrain
from as2hub.training.pretraining_data import pretraining_collator

SSP_CASES = {
    "roberta-unpadded": (RobertaForSSPPretraining, True),
    "bert-unpadded": (BertForSSPPretraining, True),
    "electra-unpadded": (ElectraForSSPPretraining, True),
    "bert-padded": (BertForSSPPretraining, False),
}


@pytest.mark.parametrize("case", sorted(SSP_CASES))
def test_ssp_training_forward_is_one_graph(case, data_dependent_shapes):
    model_class, unpadded = SSP_CASES[case]
    model = tiny(model_class, unpadded=unpadded).train()
    explained = torch._dynamo.explain(model)(**ssp_batch(model_class, "heavy"))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.parametrize("unpadded", [True, False], ids=["unpadded", "padded"])
def test_mspp_training_forward_is_one_graph(unpadded, data_dependent_shapes):
    model = joint_model("bert", "own_slot", unpadded).train()
    explained = torch._dynamo.explain(model)(**joint_batch("heavy", 0))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def dslc_batches(tokenizer, model, count: int, size: int, max_length: int = 128) -> list[dict]:
    """``count`` batches of DSLC triplets from the embedded corpus, collated as ``run_pretrain.py --torch_compile``
    collates them."""
    documents, _ = load_documents(None)
    documents = [row["paragraphs"] for row in documents]
    examples = generate_examples("dslc", documents[:16], 0) + generate_examples("dslc", documents[16:32], 1)
    random.Random(0).shuffle(examples)
    data_args = SimpleNamespace(max_length=max_length, mlm_probability=0.15, whole_word_mask=False)
    collator = pretraining_collator(data_args, tokenizer, model, resolve_objective("dslc"), compiled=True)
    torch.manual_seed(0)
    return [collator(examples[index * size : (index + 1) * size]) for index in range(count)]


@pytest.mark.slow
def test_compiled_unpadded_steps_compile_once_and_match_eager(tokenizers, data_dependent_shapes):
    """Four training steps of a compiled (inductor, ``fullgraph=True``) unpadded BERT on the run script's batches:
    every batch padded to ``max_length`` (one shape), a different number of real and masked tokens in each (sizes
    the graph reads from the data), one compile; the losses and gradients of the eager model."""
    tokenizer = tokenizers["bert"]
    model = tiny(
        BertForSSPPretraining,
        unpadded=True,
        num_segments=3,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        sep_token_id=tokenizer.sep_token_id,
        max_position_embeddings=128,
    ).train()
    batches = dslc_batches(tokenizer, model, count=4, size=6)
    assert {tuple(batch["input_ids"].shape) for batch in batches} == {(6, 128)}
    assert len({int(batch["attention_mask"].sum()) for batch in batches}) == 4  # the graph's token counts differ
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    for batch in batches:
        eager_outputs, eager_grads = run(model, batch)
        compiled_outputs, compiled_grads = run(compiled, batch)
        for key in ("loss", "mlm_loss", "cls_loss"):
            torch.testing.assert_close(compiled_outputs[key], eager_outputs[key], **GRADIENT_CLOSE, msg=key)
        for name, grad in eager_grads.items():
            torch.testing.assert_close(compiled_grads[f"_orig_mod.{name}"], grad, **GRADIENT_CLOSE, msg=name)
    assert counter.frame_count == 1


@pytest.mark.slow
def test_run_pretrain_with_torch_compile_has_no_graph_break(tmp_path):
    """``run_pretrain.py --torch_compile --unpadded``: Trainer compiles the model (dynamo + AOT autograd, the
    ``aot_eager`` backend keeps the test short; inductor is the test above), the collator pads every batch to
    ``--max_length`` and nothing breaks the graph, in training or in the held-out evaluations before and after it (two
    full batches each: the default held-out set took 94 compiled evaluation steps and a third graph, 20 of the test's
    43 s). Two graphs, each built once: the training step's and the evaluation's."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        out = tmp_path / "compiled"
        run_pretrain.main(
            ["--output_dir", str(out), "--max_steps", "3", "--per_device_train_batch_size", "8",
             "--tokenizer_vocab_size", "800", "--eval_strategy", "no", "--save_strategy", "no", "--max_length", "64",
             "--torch_compile", "--torch_compile_backend", "aot_eager", "--unpadded", "true",
             "--eval_passes", "1", "--max_eval_samples", "16", "--per_device_eval_batch_size", "8"]
        )  # fmt: skip
        assert torch._dynamo.config.capture_dynamic_output_shape_ops
        assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False
        torch._dynamo.config.capture_scalar_outputs = False
        torch._dynamo.reset()


def test_the_varlen_autograd_function_traces_as_one_graph_and_keeps_the_gradients(data_dependent_shapes, monkeypatch):
    """The flash varlen layout's ``autograd.Function`` (its ATen kernels replaced by the CPU stand-ins of ``varlen_stand_ins.py``): an
    unpadded RoBERTa step through it equals the padded step, dynamo traces the forward as one graph with the batch's
    token count read from the data, and compiled (AOT autograd, ``aot_eager``) it gives the eager losses and
    gradients: what the GPU lane's tests check with the real kernels, minus the kernels."""
    from test_unpadded import CLOSE, UNPADDING_MODULES, assert_same_step, twins

    def forward(query, key, value, cu_seqlens, max_length, dropout, scale):
        assert dropout == 0.0 and max_length == 16
        output, logsumexp = varlen_forward_stand_in(query, key, value, cu_seqlens, scale)
        return output, logsumexp, cu_seqlens.new_zeros(2, dtype=torch.int64), query.new_empty(0)

    def backward(grad, query, key, value, output, logsumexp, cu_seqlens, max_length, dropout, rng, unused, scale):
        return varlen_backward_stand_in(grad, query, key, value, logsumexp, cu_seqlens, scale)

    for module in UNPADDING_MODULES:
        monkeypatch.setattr(module, "ATTENTION_LAYOUT", "varlen")
        monkeypatch.setattr(module, "_flash_forward", forward)
        monkeypatch.setattr(module, "_flash_backward", backward)
        monkeypatch.setattr(module, "varlen_kernel", lambda qkv, head_size, m=module: m.flash_varlen_attention)
    padded, unpadded = twins(lambda flag: tiny(RobertaForSSPPretraining, unpadded=flag))
    batch = ssp_batch(RobertaForSSPPretraining, "heavy")
    eager = run(unpadded, batch)
    assert_same_step(run(padded, batch), eager, batch["attention_mask"].bool(), ["loss", "mlm_loss", "cls_loss"])
    explained = torch._dynamo.explain(unpadded)(**batch)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch._dynamo.reset()
    compiled_outputs, compiled_grads = run(torch.compile(unpadded, backend="aot_eager", fullgraph=True), batch)
    torch.testing.assert_close(compiled_outputs.loss, eager[0].loss, **CLOSE)
    for name, grad in eager[1].items():
        torch.testing.assert_close(compiled_grads[f"_orig_mod.{name}"], grad, **GRADIENT_CLOSE, msg=name)
