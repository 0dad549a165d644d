"""The structure objectives of continued pre-training: their definitions and the examples they generate.

``structure_objectives`` (each objective's one ``ObjectiveDefinition``: documents -> labelled examples, pure and
seeded), ``pretraining_examples`` (those examples materialised with ``datasets`` or streamed on the fly) and
``stream_resume`` (the example stream's exact resume, a checkpoint on SIGTERM). The public names are exported by
:mod:`as2hub.data_collators`.
"""
