"""The batch-scoring engine behind ``as2hub-score``: JSONL / Parquet inputs checked row by row and cut into shards,
each shard scored by a worker (a Ray Data actor or a ``datasets`` process) into a Parquet file written atomically, and
the run's fingerprint (inputs, settings, backend, the weights' SHA-256). The command (run_scripts/score.py) checks the
flags, compares the fingerprint with the output folder's record and calls :func:`run_ray` or :func:`run_datasets`.
"""

import dataclasses
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from as2hub.modeling.errors import ArgumentError
from as2hub.modeling.files import write_json_atomic
from as2hub.serving.options import ScoreConfig

logger = logging.getLogger("as2hub.score")

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


class ScoreInputError(ArgumentError):
    """A malformed input row or file; the message names the file and the line (row for Parquet)."""


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
        self.ranker = self.config.load_ranker()

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
        _WORKER_RANKER[key] = ScoreConfig(**config).load_ranker()
    done = [
        score_shard(_WORKER_RANKER[key], shard, ScoreConfig(**config), Path(output_dir)) for shard in shards_of(batch)
    ]
    return {key: [d[key] for d in done] for key in ("shard", "rows", "seconds")}


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
    from as2hub.modeling.folders import weights_sha256

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
# The run (as2hub-score): plan, compare with what is there, score what is missing

MANIFEST = "_as2hub_score.json"
SUCCESS = "_SUCCESS"
ENGINES = ("auto", "ray", "datasets")  # auto: Ray Data when it is installed, else datasets


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
    config = ScoreConfig(model=model, threads=threads, **options)  # checks every option's range
    check_model(model)
    engine = resolve_engine(engine)
    shards = plan(inputs, rows_per_shard, config)
    # The backend that scores, resolved once here ("auto" picks per machine): every worker loads this one by name, so
    # shards of one output never mix backends, and the record says which one scored. So is the max length (None: the
    # one the model was trained with), which the record holds as a number.
    ranker = config.load_ranker()
    config = dataclasses.replace(config, backend=ranker.backend, quantize=None, max_length=ranker.max_length)
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
    if engine not in ENGINES:
        raise ArgumentError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine
