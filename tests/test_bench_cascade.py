"""bench_cascade.py's reading per repeat (issue 51): each system's speed over the fastest CrossEncoder configuration
of the same repeat, from the recorded times, beside the rule's best against best."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_cascade import vs_best_peer_each_repeat  # noqa: E402


def test_each_repeat_is_read_against_that_repeats_fastest_peer():
    ours = {"times_s": [2.0, 4.0, 1.0]}
    peers = [{"times_s": [3.0, 5.0, 2.0]}, {"times_s": [4.0, 6.0, 1.5]}]  # the fastest: 3.0, 5.0, 1.5
    assert vs_best_peer_each_repeat(ours, peers) == pytest.approx([1.5, 1.25, 1.5])
    # a peer is 1.0x against itself in every repeat where it was the fastest
    assert vs_best_peer_each_repeat(peers[0], peers)[:2] == pytest.approx([1.0, 1.0])


def test_row_attention_is_set_while_a_system_ranks_and_restored():
    from bench_cascade import parse_args, row_attention

    from as2hub.inference import unpadded

    before = unpadded.ROW_ATTENTION
    with row_attention("sdpa"):
        assert unpadded.ROW_ATTENTION == "sdpa"
    assert unpadded.ROW_ATTENTION == before
    with row_attention(None):  # None: as it is
        assert unpadded.ROW_ATTENTION == before
    assert parse_args(["--model_dir", "m", "--row_attention", "both"]).row_attention == "both"
    with pytest.raises(SystemExit):
        parse_args(["--model_dir", "m", "--row_attention", "fast"])


def test_question_interleaving_rotates_the_systems_and_sums_each_ones_calls(monkeypatch):
    """``--interleave question``: every question goes to every system, the first system rotating by one per question
    and per repeat; each system's seconds are the sum of its own calls (a fake clock: each call of system ``k`` takes
    ``k + 1`` ticks, whatever runs before it), and the outputs are those of one pass."""
    import bench_cascade
    from bench_cascade import parse_args, timed_repeat

    clock = {"now": 0.0}
    monkeypatch.setattr(bench_cascade.time, "perf_counter", lambda: clock["now"])
    calls = []

    def system(k):
        def fn(items):
            calls.append((k, [item[0] for item in items]))
            clock["now"] += (k + 1) * len(items)
            return [(f"s{k}-{item[0]}", None) for item in items]

        return ("lib", "backend", None, fn)

    systems = {f"sys{k}": system(k) for k in range(3)}
    data = [(f"q{i}", "question", ["a", "b"], [0, 1]) for i in range(4)]
    seconds, outputs = timed_repeat(systems, data, "question", repeat=1)
    assert seconds == {"sys0": 4.0, "sys1": 8.0, "sys2": 12.0}
    assert outputs == {f"sys{k}": [(f"s{k}-q{i}", None) for i in range(4)] for k in range(3)}
    # one question per call; question i starts with system (i + repeat) % 3
    assert [k for k, _ in calls[::3]] == [1, 2, 0, 1]
    assert all(len(ids) == 1 for _, ids in calls) and [ids[0] for _, ids in calls[::3]] == ["q0", "q1", "q2", "q3"]
    calls.clear()
    seconds, outputs_pass = timed_repeat(systems, data, "pass", repeat=0)
    assert outputs_pass == outputs and seconds == {"sys0": 4.0, "sys1": 8.0, "sys2": 12.0}
    assert [(k, len(ids)) for k, ids in calls] == [(0, 4), (1, 4), (2, 4)]
    # the default follows the mode; question interleaving needs one call per question
    assert parse_args(["--model_dir", "m"]).interleave == "question"
    assert parse_args(["--model_dir", "m", "--mode", "batched"]).interleave == "pass"
    with pytest.raises(SystemExit):
        parse_args(["--model_dir", "m", "--mode", "batched", "--interleave", "question"])
