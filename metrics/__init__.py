"""AS2 ranking metrics (MAP, MRR, P@1, hit@k, nDCG@k), and random / BM25 reference rankings.

``METRIC_PATH`` is the absolute path of the self-contained ``evaluate`` metric script, so
``evaluate.load(METRIC_PATH)`` works offline (a local file never touches the Hub).
"""

from pathlib import Path

from .as2_ranking import DEFAULT_K_VALUES, AS2Ranking, compute_as2_metrics, make_compute_metrics
from .baselines import bm25_scores, expected_random_metrics, random_scores
from .hotpotqa import best_spans, hotpotqa_evaluate, qe_map, select_supporting_facts

METRIC_PATH: str = str(Path(__file__).resolve().parent / "as2_ranking.py")

__all__ = [
    "AS2Ranking",
    "DEFAULT_K_VALUES",
    "METRIC_PATH",
    "best_spans",
    "bm25_scores",
    "compute_as2_metrics",
    "expected_random_metrics",
    "hotpotqa_evaluate",
    "make_compute_metrics",
    "qe_map",
    "random_scores",
    "select_supporting_facts",
]
