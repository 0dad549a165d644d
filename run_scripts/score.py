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
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

from as2hub.modeling.files import write_json_atomic
from as2hub.run_scripts.arguments import ArgumentError, run_cli
from as2hub.serving.batch_scoring import (
    fingerprint,
    model_weights_sha256,
    plan,
    run_datasets,
    run_ray,
    shard_name,
    what_changed,
)
from as2hub.serving.options import ScoreConfig

logger = logging.getLogger("as2hub.score")

MANIFEST = "_as2hub_score.json"
SUCCESS = "_SUCCESS"
# --------------------------------------------------------------------------------------------------------------------
# The run: plan, compare with what is there, score what is missing


def prepare_output(output_dir: Path, record: dict, overwrite: bool) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    manifest = output_dir / MANIFEST
    if manifest.is_file():
        previous = json.loads(manifest.read_text())
        if previous.get("fingerprint") != record["fingerprint"]:
            if not overwrite:
                raise ArgumentError(
                    f"{output_dir} holds scores of other inputs or settings: "
                    f"{what_changed(previous.get('fingerprint') or {}, record['fingerprint'])}; pass --overwrite to "
                    "rescore, or another --output_dir"
                )
            for path in output_dir.glob("part-*.parquet"):
                path.unlink()
            (output_dir / SUCCESS).unlink(missing_ok=True)
    elif any(output_dir.glob("part-*.parquet")):
        if not overwrite:
            raise ArgumentError(f"{output_dir} holds part-*.parquet files of an unknown run: pass --overwrite")
        for path in output_dir.glob("part-*.parquet"):
            path.unlink()
    for tmp in output_dir.glob(".part-*.tmp-*"):  # left by an interrupted run
        tmp.unlink()
    write_json_atomic(manifest, record)


def score_files(
    model: str,
    inputs: list,
    output_dir,
    workers: int = 1,
    engine: str = "auto",
    rows_per_shard: int = 10000,
    overwrite: bool = False,
    address: str | None = None,
    **options,
) -> dict:
    """The Python call behind ``as2hub-score``: score ``inputs`` into Parquet shards in ``output_dir``; returns the
    summary written to ``_SUCCESS`` (``rows``, ``shards``, ``scored_shards``, ``seconds``, ``engine``, ...)."""
    started = time.perf_counter()
    inputs = [Path(p) for p in inputs]
    output_dir = Path(output_dir)
    if workers < 1 or rows_per_shard < 1:
        raise ArgumentError(f"--workers and --rows_per_shard must be at least 1, got {workers} and {rows_per_shard}")
    threads = options.pop("threads", None) or max(1, (os.cpu_count() or 1) // workers)
    config = ScoreConfig(model=model, threads=threads, **options)
    config.keep_columns = tuple(config.keep_columns)
    check_keep_columns(config)
    check_model(model)
    engine = resolve_engine(engine)
    shards = plan(inputs, rows_per_shard, config)
    # The backend that scores, resolved once here ("auto" picks per machine): every worker loads this one by name, so
    # shards of one output never mix backends, and the record says which one scored.
    ranker = config.load_ranker()
    config = dataclasses.replace(config, backend=ranker.backend, quantize=None)
    weights = model_weights_sha256(model)
    record = {
        "fingerprint": fingerprint(inputs, rows_per_shard, config, ranker.backend, weights),
        "shards": len(shards),
    }
    prepare_output(output_dir, record, overwrite)
    pending = [s for s in shards if not (output_dir / shard_name(s.index)).is_file()]
    logger.info(
        "%d rows in %d shards, %d to score (%d already there), engine %s, %d worker(s) x %d thread(s)",
        sum(s.num_rows for s in shards),
        len(shards),
        len(pending),
        len(shards) - len(pending),
        engine,
        workers,
        threads,
    )
    if pending:
        (output_dir / SUCCESS).unlink(missing_ok=True)
        if engine == "ray":
            del ranker  # the actors load their own
            run_ray(pending, config, output_dir, workers, address)
        else:
            run_datasets(pending, config, output_dir, workers, ranker=ranker)
    missing = [shard_name(s.index) for s in shards if not (output_dir / shard_name(s.index)).is_file()]
    if missing:
        raise RuntimeError(f"{len(missing)} shards were not written ({', '.join(missing[:5])}): run the command again")
    summary = {
        "rows": sum(s.num_rows for s in shards),
        "shards": len(shards),
        "scored_shards": len(pending),
        "seconds": round(time.perf_counter() - started, 3),
        "engine": engine,
        "workers": workers,
        "threads_per_worker": threads,
    }
    write_json_atomic(output_dir / SUCCESS, summary)
    return summary


OWN_COLUMNS = {
    "row": "the row number over all inputs",
    "question": "the --question_column's text",
    "candidate": "the --candidate_column's text",
    "context": "the --context_column's text",
    "score": "the ranker's score",
}


def check_keep_columns(config: ScoreConfig) -> None:
    """A kept column named like one of the output's own would silently replace it: refused, naming both."""
    for column in config.keep_columns:
        if column in OWN_COLUMNS:
            raise ArgumentError(
                f"--keep_columns {column}: the output has its own {column!r} column ({OWN_COLUMNS[column]}); "
                "rename that input column to keep it"
            )


def check_model(model: str) -> None:
    """Name a model that cannot score pairs before any row is read (a Hub id is left to the loader)."""
    from as2hub.modeling.folders import check_ranker_folder
    from as2hub.modeling.scores import JOINT_MODEL_TYPES

    if not Path(model).exists():
        if model.startswith(("/", ".", "~")) or model.count("/") != 1:
            raise FileNotFoundError(f"{model}: no such model folder")
        return
    _, model_config = check_ranker_folder(model)
    if model_config.model_type in JOINT_MODEL_TYPES:
        raise ArgumentError(
            f"{model} is a joint model: it ranks the candidates of a question together, not pairs; score the pairs "
            "with a pairwise or contextual ranker (or serve the cascade with as2hub-serve --pairwise)"
        )


def resolve_engine(engine: str) -> str:
    import importlib.util

    has_ray = importlib.util.find_spec("ray") is not None and importlib.util.find_spec("ray.data") is not None
    if engine == "auto":
        return "ray" if has_ray else "datasets"
    if engine == "ray" and not has_ray:
        raise ArgumentError('--engine ray needs Ray Data: pip install "as2hub[serve]" (or "ray[data]")')
    if engine not in ("ray", "datasets"):
        raise ArgumentError(f"--engine must be auto, ray or datasets, got {engine!r}")
    return engine


# --------------------------------------------------------------------------------------------------------------------
# The command line


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="as2hub-score", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="MODEL", help="a saved pairwise or contextual as2hub ranker")
    parser.add_argument("inputs", metavar="INPUT", nargs="+", help=".jsonl or .parquet files of pairs, in order")
    parser.add_argument("--output_dir", required=True, help="where the part-*.parquet shards go")
    parser.add_argument("--workers", type=int, default=1, help="ranker workers (Ray actors or datasets processes)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per worker (default: cores / workers)")
    parser.add_argument("--engine", default="auto", choices=("auto", "ray", "datasets"))
    parser.add_argument("--backend", default="torch", help="passed to Ranker.from_pretrained (torch, onnx, ...)")
    parser.add_argument("--quantize", default=None, help="passed to Ranker.from_pretrained (onnx: int8)")
    parser.add_argument("--rows_per_shard", type=int, default=10000)
    parser.add_argument(
        "--batch_size", type=int, default=None, help="pairs per forward pass (default: 16 on CPU, 64 on a GPU)"
    )
    parser.add_argument("--max_length", type=int, default=256, help="longer inputs are truncated, as Ranker does")
    parser.add_argument("--question_column", default="question")
    parser.add_argument("--candidate_column", default="candidate")
    parser.add_argument("--context_column", default="context")
    parser.add_argument("--keep_columns", default="", help="comma-separated input columns copied to the output")
    parser.add_argument(
        "--overwrite",
        "--overwrite_output_dir",
        dest="overwrite",
        action="store_true",
        help="rescore from scratch in an output_dir of another run (other inputs, settings, weights or backend)",
    )
    parser.add_argument("--address", default=None, help="a running Ray cluster (auto, or HOST:6379)")
    return parser.parse_args(argv)


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
        threads=args.threads,
        backend=args.backend,
        quantize=args.quantize,
        max_length=args.max_length,
        batch_size=args.batch_size,
        question_column=args.question_column,
        candidate_column=args.candidate_column,
        context_column=args.context_column,
        keep_columns=tuple(c for c in args.keep_columns.split(",") if c),
    )
    print(json.dumps(summary), flush=True)
    return summary


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-score``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
