"""The training layer, between the readers and metrics below and the publishing and serving layers above: the
``Trainer`` subclasses (:mod:`.trainers`), the argument checks and the tiny default model (:mod:`.checks`) and the
pre-training model builders (:mod:`.pretraining_models`). The resume machinery (``data_collators/stream_resume.py``),
checkpoint loading (``modeling/loading.py``) and LoRA (``modeling/lora.py``) are still where they were (their import
paths are public). The commands (run_scripts/) build on it.
"""
