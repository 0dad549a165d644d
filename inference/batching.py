"""Length batches: which pairs share a forward pass, chosen by a cost model instead of a fixed batch size.

A forward pass costs about ``call_cost + rows x longest`` token-steps: every row is padded to the batch's longest row
(rounded up to the backend's ``pad_to_multiple_of``), and each call carries a fixed cost of its own (the session or
module calls, padding the batch, converting the scores), counted in tokens. :func:`length_batches` sorts the rows by
length and cuts the sorted list where that total is smallest (an exact dynamic programme over the cut points, at most
``max_rows`` rows per batch). With a large ``call_cost`` it gives the old fixed batches of ``max_rows`` sorted rows; with
a small one, the rows of one length share a call and no row waits on a much longer one.

Why: one question's candidates differ a lot in length. On the clean WikiQA test questions, length-sorted batches of 16
(about one batch per question) spend 35% of their tokens on padding, batches of 8 24%; the cost model with
``call_cost=16`` 6%, in 2.8 times as many calls, and one question ranks 1.45x faster with ONNX int8 (1.19x with torch),
1 thread (measured 2026-11-28, AVX2 EPYC, ``benchmarks/bench_question_batching.py``). The default ``call_cost`` per
backend and thread count is measured there (:data:`DEFAULT_CALL_COST`).

Example:
    >>> length_batches([30, 12, 31, 11, 64], max_rows=16, call_cost=8)
    [[3, 1], [0, 2], [4]]
"""

import os

from as2hub.modeling.segment_layout import padded_length

# Fixed cost of one forward pass on the CPU, in tokens of a row, by backend and intra-op threads (measured on the clean
# WikiQA test questions, one call per question, best of 3: benchmarks/results/question_batching_avx2.json and
# question_batching_amx.json, inference/BACKENDS.md "Which pairs share a pass"): with more threads, or with bf16 on AMX,
# a token costs less time and a pass about as much, so the call weighs more tokens. ONNX int8 and torch fp32: 16 / 64
# were best or within 5% of the best on the AVX2 EPYC and the AMX Xeon. torch bf16 (AMX Xeon): at 16 tokens it ran
# 0.78x the fixed batches, at 256 1.05x (1 thread). More threads than measured: the last entry scaled by the threads.
# A GPU runs a token for almost nothing next to a call: infinite, i.e. full batches of ``max_rows`` sorted rows.
DEFAULT_CALL_COST = {
    "onnx": {1: 16.0, 2: 64.0},
    "torch": {1: 16.0, 2: 64.0},
    "torch-bf16": {1: 256.0, 2: 64.0},
}


def default_call_cost(device_type: str = "cpu", threads: int = 1, kind: str = "torch") -> float:
    """The cost model's ``call_cost`` for a device type, a number of intra-op threads and a kind of backend
    (``"onnx"``, ``"torch"`` fp32 or ``"torch-bf16"``; :func:`call_cost_kind` tells a model's):
    :data:`DEFAULT_CALL_COST`."""
    if device_type != "cpu":
        return float("inf")
    if kind not in DEFAULT_CALL_COST:
        raise ValueError(f"no call cost for backend kind {kind!r}: one of {sorted(DEFAULT_CALL_COST)}")
    table = DEFAULT_CALL_COST[kind]
    if threads in table:
        return table[threads]
    most = max(table)
    return table[most] * threads / most


def _session_options(model):
    """An ONNX Runtime scoring model's session options; ``None`` for a torch model (the one test of which it is)."""
    return getattr(model, "session_options", None)


def call_cost_kind(model) -> str:
    """Which row of :data:`DEFAULT_CALL_COST` a scoring model reads: ``"onnx"`` for an ONNX Runtime session,
    ``"torch-bf16"`` for a bf16 torch model, else ``"torch"``."""
    if _session_options(model) is not None:
        return "onnx"
    import torch

    return "torch-bf16" if getattr(model, "dtype", None) == torch.bfloat16 else "torch"


def scoring_threads(model) -> int:
    """The intra-op threads a scoring model computes with: an ONNX Runtime session's (its options', or one per core
    when they leave it to ONNX Runtime), else torch's."""
    options = _session_options(model)
    if options is not None:
        return options.intra_op_num_threads or len(os.sched_getaffinity(0))
    import torch

    return torch.get_num_threads()


def check_call_cost(call_cost: float) -> None:
    """Raise ``ValueError`` unless ``call_cost`` is a number of tokens >= 0 (``inf`` included)."""
    if not call_cost >= 0:
        raise ValueError(f"call_cost must be a number of tokens >= 0, got {call_cost}")


def length_batches(
    lengths: list[int], max_rows: int, call_cost: float, pad_to_multiple_of: int | None = None
) -> list[list[int]]:
    """Indices into ``lengths``, split into batches that minimize ``sum(call_cost + rows x padded longest)``.

    Each batch lists its rows shortest first, and the batches follow each other from the shortest rows to the longest;
    no batch has more than ``max_rows`` rows. Between equal costs the longer last batch wins. An infinite
    ``call_cost`` gives consecutive batches of ``max_rows`` sorted rows (the last one shorter).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    check_call_cost(call_cost)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if call_cost == float("inf"):
        return [order[start : start + max_rows] for start in range(0, len(order), max_rows)]
    sizes = [padded_length(lengths[i], pad_to_multiple_of) for i in order]
    # best[j]: the least cost of the first j sorted rows; cut[j]: where the last of their batches starts (the earliest
    # start among equal costs: starts are tried in increasing order and only a strictly lower cost replaces one)
    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        longest = sizes[end - 1]  # sorted: the batch's last row is its longest
        for start in range(max(0, end - max_rows), end):
            cost = best[start] + call_cost + (end - start) * longest
            if cost < best[end]:
                best[end], cut[end] = cost, start
    batches, end = [], len(order)
    while end:
        batches.append(order[cut[end] : end])
        end = cut[end]
    return batches[::-1]
