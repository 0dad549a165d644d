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
