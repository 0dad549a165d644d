"""Score a large JSONL / Parquet file of (question, candidate[, context]) pairs with a saved ranker, on many workers.

Usage::

    as2hub-score outputs/minilm-wikiqa pairs.jsonl --output_dir scores/           # Ray Data when installed
    as2hub-score outputs/minilm-wikiqa a.parquet b.jsonl --output_dir scores/ --workers 2 --backend onnx
    as2hub-score outputs/minilm-wikiqa pairs.jsonl --output_dir scores/ --engine datasets --workers 2

Input: JSONL (one object per line, blank lines skipped) or Parquet, with string columns ``question`` and
``candidate`` and an optional ``context`` (string or null; names set by ``--question_column`` etc.). Every row is
checked before anything is scored: a malformed row stops the command with ONE line naming its file and line
(Parquet: row, 1-based) and exit code 2.

Output: ``OUTPUT_DIR/part-00000.parquet``, ``part-00001.parquet``, ... Each input (in the order given) is cut into
shards of ``--rows_per_shard`` consecutive rows (its last shard may be shorter; a shard never spans two inputs), rows in
input order; so the shards read in name order give the input order (column ``row``: the 0-based row number over all
inputs). Columns:
``row``, ``question``, ``candidate``, ``context`` (when the input has one), the ``--keep_columns``, and ``score``
(float32, ``Ranker.score_pairs``: the probability that the candidate is correct). Each shard is written to a temporary
file and renamed into place, so a shard is there whole or not at all; ``_SUCCESS`` (JSON: rows, shards, seconds) is
written last. Run the same command again after an interruption: finished shards are kept, the others are scored.
``_as2hub_score.json`` records the inputs (size, modification time), the settings, the backend that scored (resolved:
``--backend auto`` is recorded as the backend it picked, and every worker loads that one) and the SHA-256 of the model's
weights; a run whose record differs (other inputs or settings, a model retrained into the same folder, another
backend) stops with one line naming what changed, old -> new; ``--overwrite`` (or ``--overwrite_output_dir``)
rescores from scratch. A ``--keep_columns`` column named like one of the output's own (``row``, ``question``,
``candidate``, ``context``, ``score``) is refused.

Engines: ``ray`` (Ray Data: the shards go through ``map_batches`` over a pool of ``--workers`` ranker actors, one
backend and ``--threads`` CPUs each; ``--address auto`` runs on an existing Ray cluster of several machines, every node
with as2hub installed and the model and inputs at the same path, or on shared storage) or ``datasets``
(``datasets.Dataset.map`` with ``num_proc=--workers`` on this machine); ``auto`` picks Ray when it is installed.
"""

import argparse
import json
import logging
import sys
from dataclasses import fields

from as2hub.modeling.errors import ArgumentError
from as2hub.run_scripts.arguments import run_cli
from as2hub.serving.batch_scoring import ENGINES, MANIFEST, SUCCESS, score_files
from as2hub.serving.options import ScoreConfig, add_flags

__all__ = ["MANIFEST", "SUCCESS", "ArgumentError", "build_parser", "cli", "main", "parse_args", "score_files"]


def build_parser() -> argparse.ArgumentParser:
    """The flags: the ranker's and the input's options are :class:`ScoreConfig`'s fields (``serving/options.py``:
    their defaults, help and choices, ``--backend`` among ``BACKEND_CHOICES``); the rest say where and how to run."""
    parser = argparse.ArgumentParser(prog="as2hub-score", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="MODEL", help="a saved pairwise or contextual as2hub ranker")
    parser.add_argument("inputs", metavar="INPUT", nargs="+", help=".jsonl or .parquet files of pairs, in order")
    parser.add_argument("--output_dir", required=True, help="where the part-*.parquet shards go")
    add_flags(parser, ScoreConfig)
    parser.add_argument("--workers", type=int, default=1, help="ranker workers (Ray actors or datasets processes)")
    parser.add_argument("--engine", default="auto", choices=ENGINES)
    parser.add_argument("--rows_per_shard", type=int, default=10000)
    parser.add_argument(
        "--overwrite",
        "--overwrite_output_dir",
        dest="overwrite",
        action="store_true",
        help="rescore from scratch in an output_dir of another run (other inputs, settings, weights or backend)",
    )
    parser.add_argument("--address", default=None, help="a running Ray cluster (auto, or HOST:6379)")
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    summary = score_files(
        args.model,
        args.inputs,
        args.output_dir,
        workers=args.workers,
        engine=args.engine,
        rows_per_shard=args.rows_per_shard,
        overwrite=args.overwrite,
        address=args.address,
        **{item.name: getattr(args, item.name) for item in fields(ScoreConfig) if item.name != "model"},
    )
    print(json.dumps(summary), flush=True)
    return summary


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-score``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
