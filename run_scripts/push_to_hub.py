"""Publish a run's output folder to the Hub: ``as2hub-push OUTPUT_DIR REPO_ID``.

    as2hub-push outputs/minilm-wikiqa me/minilm-wikiqa-as2                  # the model, its code, tokenizer and card
    as2hub-push outputs/lora me/roberta-as2-lora --adapter --base_model FacebookAI/roberta-base   # the LoRA adapter
    as2hub-push outputs/pretrain me/roberta-dslc --private --revision v1 --commit_message "1,500 steps of DSLC"
    python -m as2hub.run_scripts.push_to_hub outputs/minilm-wikiqa me/minilm-wikiqa-as2 --create_pr

Uploads the folder's config (every ``auto_map`` entry), model code, safetensors, tokenizer, a model card rebuilt
from the run's records (metrics in its ``model-index``) and an ONNX export when there is one (``onnx/*.onnx`` and
``onnx/as2hub_export.json`` written by ``as2hub-export-onnx`` from the same weights: sentence-transformers and
``Ranker(backend="onnx")`` look there), and nothing else unless ``--include`` asks for it
(checkpoints, predictions, logs). Before uploading it loads the folder in a fresh process without as2hub and refuses
it when it does not load or does not reproduce the trained model's outputs; the upload is one commit, so the
repository either gets the whole new revision or stays at its previous one. Token: ``--token``, ``HF_TOKEN`` or
``hf auth login``; endpoint: ``HF_ENDPOINT`` (default https://huggingface.co).
"""

import argparse
import logging
import sys

from as2hub.hub_cards.push import push_run_folder
from as2hub.hub_cards.run_record import PublishError
from as2hub.run_scripts.arguments import run_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="as2hub-push", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "output_dir",
        help="the run's output folder (written by run_as2.py, run_pretrain.py, run_joint.py or run_qe_contrastive.py)",
    )
    parser.add_argument("repo_id", help="namespace/name of the model repository (created if it does not exist)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--revision", help="branch to commit to (created from main if it does not exist)")
    parser.add_argument("--commit_message", help="commit summary (default: what is uploaded)")
    parser.add_argument("--create_pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--adapter", action="store_true", help="LoRA runs: push the adapter, not the merged model")
    parser.add_argument("--base_model", help="Hub id of the LoRA base model (when the run used a local folder)")
    parser.add_argument("--license", help="license of the weights for the card (a Hub license id)")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="also upload these files or folders of the run (relative globs, repeatable), e.g. all_results.json",
    )
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the one saved by `hf auth login`)")
    parser.add_argument("--endpoint", help="Hub endpoint (default: HF_ENDPOINT or https://huggingface.co)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        commit = push_run_folder(
            args.output_dir,
            args.repo_id,
            token=args.token,
            endpoint=args.endpoint,
            private=args.private or None,
            revision=args.revision,
            commit_message=args.commit_message,
            create_pr=args.create_pr,
            adapter=args.adapter,
            base_model=args.base_model,
            license=args.license,
            include=args.include,
        )
    except PublishError as error:
        print(f"as2hub-push: error: {error}", file=sys.stderr)
        return 2
    print(commit.pr_url or commit.commit_url)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-push``): ``main`` reports a refused push itself (exit code 2); other user errors
    (e.g. a missing folder) also end in one line on stderr."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
