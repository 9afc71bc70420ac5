"""``lightning-episodes predict --ckpt_path CKPT --support DIR --query DIR [--output CSV] [--device DEVICE]``:
classify your own images with a checkpoint (:func:`lightning_episodes.inference.predict`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_episodes.commands._common import (
    add_allowed_modules_argument,
    add_device_argument,
    arguments,
    command_parser,
    probe_output,
    resolve_device,
)
from lightning_episodes.inference import predict, write_csv

DESCRIPTION = """\
Classify the images of a query folder among the classes of a support folder (one sub-folder per class,
k images each) with a trained checkpoint of any algorithm; writes the query, the predicted class and one
probability column per class as CSV.

example:
  lightning-episodes predict --ckpt_path runs/quickstart/logs/version_0/checkpoints/last.ckpt \\
      --support my_support/ --query my_queries/ --output predictions.csv
"""


def parser() -> Any:
    """The ``predict`` parser."""
    parser = command_parser("predict", DESCRIPTION)
    parser.add_argument("--ckpt_path", type=str, required=True, help="checkpoint of any algorithm of this library")
    parser.add_argument("--support", type=Path, required=True, help="folder with one sub-folder of images per class")
    parser.add_argument("--query", type=Path, required=True, help="folder of images to classify")
    parser.add_argument("--output", type=Path | None, default=None, help="CSV file to write (default: stdout)")
    add_device_argument(parser)
    add_allowed_modules_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Classify the query images and write the CSV.

    Returns:
        0.

    Raises:
        argparse.ArgumentError: for an unknown option or a value of the wrong type.
        ValueError: for an unknown or absent ``--device``, a broken checkpoint or one naming a class outside this
            library and ``--allowed_modules``, or folders or images that cannot be used.
        FileNotFoundError: if the checkpoint or a folder does not exist.
        OSError: naming the path, if ``--output`` cannot be written.
    """
    args = parser().parse_args(arguments(argv))
    device = resolve_device(args.device)
    probe_output(args.output, "--output")
    predictions = predict(args.ckpt_path, args.support, args.query, device, args.allowed_modules)
    write_csv(predictions, args.output)
    if args.output is not None:
        print(
            f"predicted {len(predictions)} queries among {len(predictions[0].probabilities)} classes -> {args.output}"
        )
    return 0
