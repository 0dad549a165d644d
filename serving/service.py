"""The service's life on Ray Serve, without the command line: the folders checked before Ray starts, the application
built, started on Ray (a local instance or a cluster) and stopped. ``as2hub-serve`` (run_scripts/serve.py) parses
its flags into a :class:`~as2hub.serving.options.ServeConfig` and calls these; importing this module needs no Ray
(the ``serve`` extra is imported, and checked by :func:`require_serve`, only when the service starts).
"""

import os
from dataclasses import asdict
from pathlib import Path

from as2hub.modeling.errors import ArgumentError
from as2hub.serving.options import ServeConfig
from as2hub.serving.scorer import is_joint_folder

INSTALL_HINT = 'pip install "as2hub[serve]"  (Ray Serve and FastAPI)'
APP_NAME = "as2hub"


def check_folders(config: ServeConfig) -> None:
    """Name a wrong folder or a contradictory option before Ray starts (a Hub id is left to the loader). The
    options' own ranges were checked when ``config`` was made (``ServeConfig.__post_init__``)."""
    from as2hub.inference.cascade import cascade_layers
    from as2hub.modeling.folders import check_ranker_folder

    model_config = None
    for path in (config.model, config.pairwise):
        if path is None:
            continue
        if Path(path).exists():
            _, folder_config = check_ranker_folder(path)
            model_config = folder_config if path == config.model else model_config
        elif path.startswith(("/", ".", "~")) or path.count("/") != 1:  # not a Hub id (org/name) either
            raise FileNotFoundError(f"{path}: no such model folder")
    if config.pairwise is not None:
        if not is_joint_folder(config.model):
            raise ArgumentError(f"--pairwise is the first stage of a cascade: {config.model} is not a joint model")
        if is_joint_folder(config.pairwise):
            raise ArgumentError(f"--pairwise {config.pairwise} is a joint model: pass a pairwise (run_as2) ranker")
    if config.cascade_drop is not None and model_config is not None and not cascade_layers(model_config):
        raise ArgumentError(
            f"--cascade_drop needs a model with cascade heads: {config.model} has none (train them with "
            "as2hub-train --cascade_layers 2,4, or --cascade_heads_only on this ranker)"
        )


def require_serve():
    """Import Ray Serve and FastAPI; an :class:`ArgumentError` (one line on the command line) when they are missing."""
    try:
        import fastapi  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as error:
        raise ArgumentError(f"as2hub-serve needs the `serve` extra: {INSTALL_HINT} ({error})") from error


def build_app(config: ServeConfig, replicas: int = 1):
    """The Serve application for ``serve.run``: ``replicas`` scoring replicas of one ranker, ``config.threads`` CPUs
    each, behind one ingress (:func:`as2hub.serving.http.application`)."""
    require_serve()
    from as2hub.serving.http import application

    threads = config.threads or max(1, (os.cpu_count() or 1) // max(1, replicas))
    return application(ServeConfig(**{**asdict(config), "threads": threads}), replicas)


def start(
    config: ServeConfig,
    replicas: int = 1,
    host: str = "127.0.0.1",
    port: int = 8000,
    address=None,
    name: str = APP_NAME,
    route_prefix: str = "/",
):
    """Start (or join) Ray, start Serve's HTTP proxy on ``host:port`` and deploy; returns the app's handle once
    every replica has loaded its model."""
    require_serve()
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": host, "port": port})
    return serve.run(build_app(config, replicas), name=name, route_prefix=route_prefix, blocking=False)


def replica_error() -> str | None:
    """The last line of the failed deployment's message (its replica's exception), or None."""
    from ray import serve

    try:
        deployments = serve.status().applications[APP_NAME].deployments
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return None
    lines = [line.strip() for d in deployments.values() for line in (d.message or "").splitlines() if line.strip()]
    return lines[-1] if lines else None


def stop_serving(address) -> None:
    """A private Ray instance is stopped; on a shared cluster only this application is removed."""
    import ray
    from ray import serve

    if address is None:
        serve.shutdown()
        ray.shutdown()
    else:
        serve.delete(APP_NAME)
