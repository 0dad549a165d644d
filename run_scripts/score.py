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
from dataclasses import asdict, dataclass
from pathlib import Path

from as2hub.run_scripts.arguments import ArgumentError, run_cli

logger = logging.getLogger("as2hub.score")

MANIFEST = "_as2hub_score.json"
SUCCESS = "_SUCCESS"
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


class ScoreInputError(ArgumentError):
    """A malformed input row or file; the message names the file and the line (row for Parquet)."""


@dataclass
class ScoreConfig:
    model: str
    backend: str = "torch"
    quantize: str | None = None
    threads: int | None = None
    max_length: int = 256
    batch_size: int | None = None  # pairs per forward pass; None: 16 on CPU, 64 on a GPU (Ranker's default)
    question_column: str = "question"
    candidate_column: str = "candidate"
    context_column: str = "context"
    keep_columns: tuple[str, ...] = ()


@dataclass
class Shard:
    """``num_rows`` rows of one input file from row ``start_row``; JSONL: from byte ``offset`` (line ``first_line``);
    Parquet: from row ``offset`` of row group ``row_group``."""

    index: int
    path: str
    kind: str  # "jsonl" / "parquet"
    first_row: int  # global row number of the first row
    num_rows: int
    offset: int
    first_line: int = 0
    row_group: int = 0
    has_context: bool = False


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def input_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(JSON_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    raise ScoreInputError(f"{path}: unknown input format: pass .jsonl (or .ndjson, .json lines) or .parquet files")


# --------------------------------------------------------------------------------------------------------------------
# Reading and checking rows


def check_row(row, where: str, config: ScoreConfig) -> bool:
    """Raise :class:`ScoreInputError` naming ``where`` for a malformed row; True when it has a context."""
    if not isinstance(row, dict):
        raise ScoreInputError(
            f"{where}: expected a JSON object with {config.question_column!r} and "
            f"{config.candidate_column!r}, got {type(row).__name__}"
        )
    for column in (config.question_column, config.candidate_column):
        if column not in row:
            raise ScoreInputError(f"{where}: missing {column!r} (keys: {', '.join(map(repr, row)) or 'none'})")
        if not isinstance(row[column], str):
            raise ScoreInputError(f"{where}: {column!r} must be a string, got {type(row[column]).__name__}")
    context = row.get(config.context_column)
    if context is not None and not isinstance(context, str):
        raise ScoreInputError(
            f"{where}: {config.context_column!r} must be a string or null, got {type(context).__name__}"
        )
    for column in config.keep_columns:
        if column not in row:
            raise ScoreInputError(f"{where}: missing {column!r}, a --keep_columns column")
    return config.context_column in row


def jsonl_lines(path: Path, offset: int = 0, first_line: int = 1):
    """``(line number, byte offset, parsed object)`` of every non-blank line from ``offset``."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        number, position = first_line, offset
        for raw in handle:
            start, position = position, position + len(raw)
            if raw.strip():
                try:
                    row = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as error:
                    raise ScoreInputError(f"{path}:{number}: not valid JSON ({error})") from None
                yield number, start, row
            number += 1


def parquet_file(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
        raise ScoreInputError(f"{path}: not a readable Parquet file ({error})") from None


def parquet_columns(path: Path, config: ScoreConfig) -> list[str]:
    names = parquet_file(path).schema_arrow.names
    for column in (config.question_column, config.candidate_column, *config.keep_columns):
        if column not in names:
            raise ScoreInputError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
    return [c for c in (config.question_column, config.candidate_column, config.context_column) if c in names] + [
        c for c in config.keep_columns if c not in (config.question_column, config.candidate_column)
    ]


def parquet_rows(path: Path, config: ScoreConfig, row_group: int = 0, offset: int = 0, batch_rows: int = 4096):
    """``(row number in the file, row group, offset in it, row dict)`` from row ``offset`` of ``row_group``."""
    handle = parquet_file(path)
    columns = parquet_columns(path, config)
    number = sum(handle.metadata.row_group(g).num_rows for g in range(row_group))
    for group in range(row_group, handle.num_row_groups):
        skip = offset if group == row_group else 0
        position = 0
        for batch in handle.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns):
            for row in batch.to_pylist():
                if position >= skip:
                    yield number + position, group, position, row
                position += 1
        number += handle.metadata.row_group(group).num_rows


def plan(inputs: list[Path], rows_per_shard: int, config: ScoreConfig) -> list[Shard]:
    """Check every row (streaming: memory does not grow with the input) and cut the inputs into shards."""
    shards: list[Shard] = []
    first_row = 0
    for path in inputs:
        kind = input_kind(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such input file")
        current = None
        if kind == "jsonl":
            rows = ((f"{path}:{line}", offset, line, 0, row) for line, offset, row in jsonl_lines(path))
        else:
            rows = ((f"{path}: row {n + 1}", off, 0, g, row) for n, g, off, row in parquet_rows(path, config))
        for where, offset, line, group, row in rows:
            has_context = check_row(row, where, config)
            if current is None or current.num_rows == rows_per_shard:
                current = Shard(len(shards), str(path), kind, first_row, 0, offset, line, group, has_context)
                shards.append(current)
            current.num_rows += 1
            current.has_context = current.has_context or has_context
            first_row += 1
    if not shards:
        raise ScoreInputError(f"no rows to score in {', '.join(map(str, inputs))}")
    has_context = any(shard.has_context for shard in shards)
    for shard in shards:  # one schema for every shard: a context column everywhere or nowhere
        shard.has_context = has_context
    return shards


def read_shard(shard: Shard, config: ScoreConfig) -> list[dict]:
    if shard.kind == "jsonl":
        rows = (
            (f"{shard.path}:{line}", row)
            for line, _, row in jsonl_lines(Path(shard.path), shard.offset, shard.first_line)
        )
    else:
        rows = (
            (f"{shard.path}: row {n + 1}", row)
            for n, _, _, row in parquet_rows(Path(shard.path), config, shard.row_group, shard.offset)
        )
    out = []
    for where, row in rows:
        if len(out) == shard.num_rows:
            break
        check_row(row, where, config)  # the file may have changed since it was planned
        out.append(row)
    if len(out) != shard.num_rows:
        raise ScoreInputError(f"{shard.path}: ended before its planned rows: the file changed during the run")
    return out


# --------------------------------------------------------------------------------------------------------------------
# Scoring a shard (inside a worker: a Ray actor or a datasets process)


def load_ranker(config: ScoreConfig):
    import torch

    from as2hub.modeling.ranking import Ranker

    if config.threads is not None:
        torch.set_num_threads(config.threads)
    options = {"backend": config.backend}
    if config.quantize is not None:
        options["quantize"] = config.quantize
    if config.threads is not None and (config.backend == "auto" or config.backend.startswith("onnx")):
        options["num_threads"] = config.threads
    return Ranker.from_pretrained(config.model, max_length=config.max_length, batch_size=config.batch_size, **options)


def score_shard(ranker, shard: Shard, config: ScoreConfig, output_dir: Path) -> dict:
    """Score one shard and write it atomically (temporary file, fsync, rename); returns its row count and time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    rows = read_shard(shard, config)
    questions = [row[config.question_column] for row in rows]
    candidates = [row[config.candidate_column] for row in rows]
    contexts = [row.get(config.context_column) or "" for row in rows] if shard.has_context else None
    scores = ranker.score_pairs(questions, candidates, contexts if ranker.contextual else None).numpy()
    columns = {
        "row": pa.array(range(shard.first_row, shard.first_row + shard.num_rows), pa.int64()),
        "question": pa.array(questions, pa.string()),
        "candidate": pa.array(candidates, pa.string()),
    }
    if shard.has_context:
        columns["context"] = pa.array([row.get(config.context_column) for row in rows], pa.string())
    for column in config.keep_columns:
        columns[column] = pa.array([row[column] for row in rows])
    columns["score"] = pa.array(scores, pa.float32())
    target = output_dir / shard_name(shard.index)
    tmp = output_dir / f".{target.name}.tmp-{os.getpid()}"
    pq.write_table(pa.table(columns), tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    return {"shard": shard.index, "rows": shard.num_rows, "seconds": time.perf_counter() - started}


class ShardScorer:
    """The Ray Data actor: one ranker (one backend) per actor, a batch of shard descriptions per call."""

    def __init__(self, config: dict, output_dir: str):
        self.config = ScoreConfig(**config)
        self.output_dir = Path(output_dir)
        self.ranker = load_ranker(self.config)

    def __call__(self, batch: dict) -> dict:
        done = [self.score(shard) for shard in shards_of(batch)]
        return {key: [d[key] for d in done] for key in ("shard", "rows", "seconds")}

    def score(self, shard: Shard) -> dict:
        return score_shard(self.ranker, shard, self.config, self.output_dir)


def shards_of(batch: dict) -> list[Shard]:
    """Shards back from a columnar batch (Ray Data's numpy dict, datasets' dict of lists)."""
    names = [field.name for field in dataclasses.fields(Shard)]
    count = len(batch["index"])
    out = []
    for i in range(count):
        values = {name: batch[name][i] for name in names}
        values = {k: v.item() if hasattr(v, "item") else v for k, v in values.items()}
        out.append(Shard(**values))
    return out


_WORKER_RANKER = {}


def score_batch_in_process(batch: dict, config: dict, output_dir: str) -> dict:
    """``datasets.Dataset.map`` function: the ranker is loaded once per process."""
    key = json.dumps(config, sort_keys=True)
    if key not in _WORKER_RANKER:
        _WORKER_RANKER.clear()
        _WORKER_RANKER[key] = load_ranker(ScoreConfig(**config))
    done = [
        score_shard(_WORKER_RANKER[key], shard, ScoreConfig(**config), Path(output_dir)) for shard in shards_of(batch)
    ]
    return {key: [d[key] for d in done] for key in ("shard", "rows", "seconds")}


# --------------------------------------------------------------------------------------------------------------------
# The run: plan, compare with what is there, score what is missing


def fingerprint(
    inputs: list[Path], rows_per_shard: int, config: ScoreConfig, backend: str, weights: str | None
) -> dict:
    """What makes the shards of a run: the inputs (path, size, modification time), the settings, the backend that
    scored (resolved: ``auto`` is recorded as what it picked) and the SHA-256 of the model's weights (a model retrained
    into the same folder is another model)."""
    files = [{"path": str(p.resolve()), "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns} for p in inputs]
    settings = {k: v for k, v in asdict(config).items() if k not in ("threads", "backend", "quantize")}
    settings["keep_columns"] = list(config.keep_columns)
    settings["model"] = str(Path(config.model).resolve()) if Path(config.model).exists() else config.model
    return {
        "inputs": files,
        "rows_per_shard": rows_per_shard,
        "settings": settings,
        "backend": backend,
        "weights_sha256": weights,
    }


def model_weights_sha256(model: str) -> str | None:
    """SHA-256 of a saved ranker's weight files; a Hub id: of its cached download (None when it cannot be found)."""
    from as2hub.modeling.onnx_backend import weights_sha256

    folder = Path(model)
    if not folder.exists():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, local_files_only=True))
        except Exception:  # noqa: BLE001 - no cached download: the record says so (None)
            logger.warning(
                "%s: no local copy of the weights to hash; the run's record cannot tell a new revision", model
            )
            return None
    return weights_sha256(folder)


def what_changed(previous: dict, current: dict) -> str:
    """One line naming what differs between two runs' fingerprints (old -> new)."""

    def short(value):
        return f"{value[:12]}..." if isinstance(value, str) and len(value) == 64 else value

    changes = []
    if "weights_sha256" not in previous:  # a record of an as2hub-score that did not hash the weights
        changes.append("the record has no hash of the weights that scored (an older as2hub-score wrote it)")
    elif previous["weights_sha256"] != current["weights_sha256"]:
        old, new = short(previous["weights_sha256"]), short(current["weights_sha256"])
        changes.append(f"the model's weights changed (sha256 {old} -> {new})")
    if "backend" in previous and previous["backend"] != current["backend"]:
        changes.append(f"backend {previous['backend']!r} -> {current['backend']!r}")
    old_inputs, new_inputs = previous.get("inputs", []), current["inputs"]
    if [f.get("path") for f in old_inputs] != [f["path"] for f in new_inputs]:
        names = [Path(f.get("path", "?")).name for f in old_inputs], [Path(f["path"]).name for f in new_inputs]
        changes.append(f"inputs {', '.join(names[0])} -> {', '.join(names[1])}")
    else:
        changes += [f"{Path(new['path']).name} changed (size or modification time)" for old, new in
                    zip(old_inputs, new_inputs) if old != new]  # fmt: skip
    if previous.get("rows_per_shard") != current["rows_per_shard"]:
        changes.append(f"rows_per_shard {previous.get('rows_per_shard')} -> {current['rows_per_shard']}")
    old_settings, new_settings = previous.get("settings", {}), current["settings"]
    for key in sorted(set(old_settings) | set(new_settings)):
        if old_settings.get(key) != new_settings.get(key):
            changes.append(f"{key} {old_settings.get(key)!r} -> {new_settings.get(key)!r}")
    return "; ".join(changes) or "the record differs"


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


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
    ranker = load_ranker(config)
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
    from as2hub.modeling.onnx_backend import JOINT_MODEL_TYPES, check_ranker_folder

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


def run_ray(pending: list[Shard], config: ScoreConfig, output_dir: Path, workers: int, address) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    items = [asdict(shard) for shard in pending]
    dataset = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        ShardScorer,
        fn_constructor_kwargs={"config": asdict(config), "output_dir": str(output_dir)},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=config.threads,
    )
    done = 0
    for row in dataset.iter_rows():
        done += 1
        logger.info(
            "shard %d: %d rows in %.2f s (%d/%d)", row["shard"], row["rows"], row["seconds"], done, len(pending)
        )


def run_datasets(pending: list[Shard], config: ScoreConfig, output_dir: Path, workers: int, ranker=None) -> None:
    import datasets

    num_proc = workers if workers > 1 and len(pending) > 1 else None
    _WORKER_RANKER.clear()
    if num_proc is None and ranker is not None:  # scored in this process: with the ranker already loaded
        _WORKER_RANKER[json.dumps(asdict(config), sort_keys=True)] = ranker
    table = datasets.Dataset.from_list([asdict(shard) for shard in pending])
    try:
        done = table.map(
            score_batch_in_process,
            batched=True,
            batch_size=1,
            num_proc=num_proc,
            fn_kwargs={"config": asdict(config), "output_dir": str(output_dir)},
            remove_columns=table.column_names,
            keep_in_memory=True,
            load_from_cache_file=False,
            desc="scoring shards",
        )
    finally:
        _WORKER_RANKER.clear()
    logger.info("scored %d shards, %d rows", len(done), sum(done["rows"]))


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
