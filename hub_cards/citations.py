"""BibTeX of the papers as2hub implements (titles, authors and venues as the papers' text states them).

A family names the keys it cites (``Family.citations``); the card prints their entries in that order. No field is
given that the papers' text does not state (no pages, no DOI, no URL).
"""

BIBTEX = {
    "diliello2023context": """@inproceedings{diliello2023context,
  title     = {Context-Aware Transformer Pre-Training for Answer Sentence Selection},
  author    = {Di Liello, Luca and Garg, Siddhant and Moschitti, Alessandro},
  booktitle = {Annual Meeting of the Association for Computational Linguistics (ACL 2023)},
  year      = {2023}
}""",
    "diliello2022sentence": """@inproceedings{diliello2022sentence,
  title     = {Pre-training Transformer Models with Sentence-Level Objectives for Answer Sentence Selection},
  author    = {Di Liello, Luca and Garg, Siddhant and Soldaini, Luca and Moschitti, Alessandro},
  booktitle = {Conference on Empirical Methods in Natural Language Processing (EMNLP 2022)},
  year      = {2022}
}""",
    "diliello2022paragraph": """@inproceedings{diliello2022paragraph,
  title     = {Paragraph-based Transformer Pre-training for Multi-Sentence Inference},
  author    = {Di Liello, Luca and Garg, Siddhant and Soldaini, Luca and Moschitti, Alessandro},
  booktitle = {Proceedings of the 2022 Conference of the North American Chapter of the Association for Computational
               Linguistics},
  address   = {Seattle, Washington},
  publisher = {Association for Computational Linguistics},
  year      = {2022}
}""",
    "caciularu2022long": """@inproceedings{caciularu2022long,
  title     = {Long Context Question Answering via Supervised Contrastive Learning},
  author    = {Caciularu, Avi and Dagan, Ido and Goldberger, Jacob and Cohan, Arman},
  booktitle = {Conference of the North American Chapter of the Association for Computational Linguistics
               (NAACL 2022)},
  year      = {2022}
}""",
}
