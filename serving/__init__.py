"""The serving layer: scoring saved rankers for others, without the command lines.

    options.py         RankerOptions (the one backend options type), ServeConfig, ScoreConfig: every option's one
                       home (default, help, choices: the commands' flags are built from them; ranges checked once,
                       in ``__post_init__``)
    service.py         the service's life on Ray Serve: folders checked before Ray starts, the app built, started,
                       stopped (imports no Ray until then)
    scorer.py          RerankScorer: a loaded ranker (pairwise, contextual, joint or the cascade) scoring batches of
                       requests; Query, Ranked, raw_score
    messages.py        what the service's processes exchange (Query, Ranked, Refused, raw_score): the standard library only
    http.py            the FastAPI app and the Ray Serve deployments (needs the ``serve`` extra); the ingress process
                       imports no torch, Transformers or models (the scoring replicas load them)
    batch_scoring.py   the batch-scoring engine and run: plan shards of JSONL / Parquet inputs, score them on Ray Data or
                       ``datasets`` workers, the run's record (``score_files``)

``as2hub-serve`` (run_scripts/serve.py) and ``as2hub-score`` (run_scripts/score.py) parse flags, check them and call
these. What a scoring backend must provide is :class:`~as2hub.inference.backends.ScoringModel`.
"""
