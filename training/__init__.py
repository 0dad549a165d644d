"""The training layer, between the readers and metrics below and the publishing and serving layers above: the
``Trainer`` subclasses (:mod:`.trainers`). The resume machinery (``data_collators/stream_resume.py``), checkpoint
loading (``modeling/loading.py``), LoRA (``modeling/lora.py``) and the run scripts' model builders and argument checks
are still where they were (their import paths are public). The commands (run_scripts/) build on it.
"""
