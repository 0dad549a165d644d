"""The training layer, between the readers and metrics below and the publishing and serving layers above; the
commands (run_scripts/) parse and check their flags and call it, their ``main()`` reading as the HF examples' do:

- :mod:`.trainers`: the ``Trainer`` subclass of pre-training (``SSPTrainer``);
- :mod:`.checks`: the argument checks (``check_max_length``, ``check_slot_budget``) and the tiny default model; they
  raise ``ArgumentError``, whose home is ``modeling/errors.py`` (the lowest layer, so that ``serving/`` raises the same
  class without importing this layer), re-exported here and by ``.checks``;
- :mod:`.pretraining_models`, :mod:`.pretraining_data`: ``run_pretrain.py``'s model and tokenizer builders, and its
  corpus (read whole or streamed), training and held-out examples and collator;
- :mod:`.resume`: exact streaming resume wired into a trainer, a checkpoint already at ``max_steps``, a run stopped
  by SIGTERM;
- :mod:`.joint_finetuning`: ``run_joint.py``'s splits, slot groups, model loading and metrics (AS2, the cascade, fact
  verification);
- :mod:`.qe_finetuning`: ``run_qe_contrastive.py``'s model building, encoded splits and HotpotQA metrics.

What a run writes (predictions, the Hub folder) is ``hub_cards/run_outputs.py``. The stream bookkeeping
(``data_collators/objectives/stream_resume.py``), checkpoint loading (``modeling/loading.py``) and LoRA (``modeling/lora.py``,
``--use_lora``: ``run_scripts/arguments.py``'s ``LoraArguments``) stay where they are (their import paths are public).
"""

from as2hub.modeling.errors import ArgumentError

__all__ = ["ArgumentError"]
