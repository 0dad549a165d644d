"""Export a saved as2hub ranker to ONNX (and int8) inside its own folder, where sentence-transformers looks.

Usage::

    as2hub-export-onnx outputs/minilm-wikiqa --quantize int8
    python -m as2hub.run_scripts.export_onnx outputs/minilm-wikiqa          # fp32 only

Writes ``OUTPUT_DIR/onnx/model.onnx``, with ``--quantize int8`` also ``onnx/model_qint8_dynamic.onnx``, and
``onnx/as2hub_export.json`` (weights hash, versions, largest logit difference vs torch); for a ranker with cascade
heads (``cascade_layers``) also one graph per cascade stage (``onnx/cascade_stage{k}[_qint8_dynamic].onnx``,
``inference/BACKENDS.md``), which ``Ranker.rank(..., cascade_drop=...)`` runs on the ONNX backends. Needs
``pip install "as2hub[onnx]"``. Then ``Ranker.from_pretrained(OUTPUT_DIR, backend="onnx", quantize="int8")``, or for a
joint multi-candidate model (``run_joint.py``'s output: one graph over the (k+1)·L slot layout)
``JointRanker.from_pretrained(OUTPUT_DIR, backend="onnx", quantize="int8")``.
"""

import argparse
import json
import logging
import sys

from as2hub.inference.onnx_export import DEFAULT_OPSET, export_onnx
from as2hub.modeling.folders import QUANTIZE_CHOICES, check_ranker_folder
from as2hub.run_scripts.arguments import run_cli, setup_logging

logger = logging.getLogger("as2hub.export_onnx")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="as2hub-export-onnx", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "output_dir",
        metavar="OUTPUT_DIR",
        help="a saved as2hub ranker (the --output_dir of run_as2.py or run_joint.py)",
    )
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=None, help="also write a quantized graph")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    check_ranker_folder(args.output_dir)  # a wrong folder is named before the onnx extra is needed
    paths = export_onnx(args.output_dir, quantize=args.quantize, opset=args.opset)
    written = {kind: str(path) for kind, path in paths.items()}
    logger.info("wrote %s", json.dumps(written))
    return written


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-export-onnx``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
