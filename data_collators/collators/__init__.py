"""Collators: tokenized examples -> model batches, and the tokenizers they use.

``as2_collator`` (the contextual AS2 cross-encoders), ``joint_collator`` (the joint multi-candidate models),
``pretraining_collator`` (MLM + a structure objective), ``hotpotqa_encoding`` (the Longformer QE input and its collator),
``hotpotqa_markers`` (its marker tokens) and ``tokenizer_training`` (a small tokenizer trained on a corpus). The public
names are exported by :mod:`as2hub.data_collators`.
"""
