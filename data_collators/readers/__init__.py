"""Readers: files and datasets -> canonical rows.

``text_files`` (text and JSON files, typed errors naming the file and line), ``sentence_splitter`` (offline NLTK
Punkt), ``corpus`` (corpus -> documents -> paragraphs -> sentences), ``as2_data`` (AS2 and WikiQA), ``as2_splits``
(``run_as2``'s splits, the embedded task), ``fv_data`` (fact verification), ``hotpotqa`` (HotpotQA records),
``qe_tasks`` (``run_qe_contrastive``'s splits), ``joint_data`` (candidates grouped into the joint models' k slots, score
columns). The public names are exported by :mod:`as2hub.data_collators`.
"""
