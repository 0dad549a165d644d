"""How far each token-type initialisation moves a pretrained encoder before any training.

Growing MiniLM's 2-row token-type table to 3 rows for contextual AS2 can keep the pretrained rows and draw the new one
(``scratch``, as2hub's default), copy the last pretrained row into it (``copy``), or draw the whole table anew
(``scratch_all``, the literal reading of "we initialize the sentence embeddings layers ... from scratch, and extend
them to an input size of 3", Di Liello et al., 2023, appendix C). This script feeds the same WikiQA dev pairs and
(question, candidate, context) triplets to the stock encoder and to each grown one and reports the cosine similarity of
their last hidden states (every non-padding token, and the [CLS] token the head reads).

    python benchmarks/bench_token_type_init.py [--pairs 200]

Writes ``benchmarks/results/token_type_init.json``. A few seconds on CPU.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

INITS = ("scratch", "copy", "scratch_all")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(RESULTS_DIR / "token_type_init.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from transformers import AutoTokenizer, BertModel

    from as2hub.data_collators import ContextualAS2Collator, read_wikiqa
    from as2hub.modeling import BertForContextualAS2

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    stock = BertModel.from_pretrained(path).eval()
    rows = read_wikiqa("dev", clean=True).dataset.select(range(args.pairs))
    inputs = {}
    for name, contextual in (("pairs (q, s)", False), ("triplets (q, s, c)", True)):
        collator = ContextualAS2Collator(tokenizer, max_length=256, contextual=contextual)
        inputs[name] = collator([{k: row[k] for k in ("question", "candidate", "context")} for row in rows])
    results = {}
    with torch.no_grad():
        for init in INITS:
            torch.manual_seed(args.seed)
            grown = BertForContextualAS2.from_pretrained(
                path, token_type_init=init, sep_token_id=tokenizer.sep_token_id
            )
            grown.eval()
            for name, batch in inputs.items():
                mask = batch["attention_mask"].bool()
                # The stock encoder has 2 rows: the context (id 2) is fed as the candidate's segment (1) there.
                reference = stock(**{**batch, "token_type_ids": batch["token_type_ids"].clamp(max=1)}).last_hidden_state
                hidden = grown.bert(**batch).last_hidden_state
                tokens = torch.nn.functional.cosine_similarity(hidden[mask], reference[mask], dim=-1)
                first = torch.nn.functional.cosine_similarity(hidden[:, 0], reference[:, 0], dim=-1)
                results.setdefault(init, {})[name] = {
                    "token_cosine_mean": tokens.mean().item(),
                    "token_cosine_min": tokens.min().item(),
                    "cls_cosine_mean": first.mean().item(),
                }
    headers = ["token_type_init", "input", "token cos (mean)", "token cos (min)", "[CLS] cos (mean)"]
    table = [
        [init, name, value["token_cosine_mean"], value["token_cosine_min"], value["cls_cosine_mean"]]
        for init, by_input in results.items()
        for name, value in by_input.items()
    ]
    print(format_table(headers, table))
    write_json(
        args.results,
        {
            "benchmark": "token_type_init",
            "date": now_iso(),
            "machine": machine_info(),
            "settings": {"model": "sentence-transformers/all-MiniLM-L6-v2", "pairs": args.pairs, "seed": args.seed},
            "data": "WikiQA dev (clean), first rows; context = previous + next sentence",
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
