"""Evaluate a trained model without training: metrics.json and a confusion matrix.

To run:
    python evaluate.py runs/.../checkpoints/best-epoch41.ckpt          # its run's test split
    python evaluate.py runs/.../export/model.pt2                       # an export, the same
    python evaluate.py runs/.../export/model.pt2 --data.path new.csv   # all of other data
    python evaluate.py MODEL --split val                               # test, val, train, all

A checkpoint or an export (with the metadata.json beside it) is scored on the data it was
trained on, split as in training, or on any --data.path read as its training data was.
metrics.json holds the accuracy, the loss and each class's precision, recall, F1 and support.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

from {{ cookiecutter.package_name }}.report.evaluation import (
    SPLITS,
    EvaluationError,
    evaluate,
    evaluation_data,
    load_evaluated,
)
from {{ cookiecutter.package_name }}.runtime import quiet_known_noise


def main(args: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a .ckpt checkpoint or an exported model")
    parser.add_argument(
        "--data.path", dest="data_path", metavar="PATH", help="other data (default: its own)"
    )
    parser.add_argument(
        "--split", choices=SPLITS, help="test (default for its own data) or all (for --data.path)"
    )
    parser.add_argument("--out", type=Path, help="default: runs/evaluations/<time>-<model>")
    options = parser.parse_args(args)
    split = options.split or ("all" if options.data_path else "test")
    stem = options.model.name.replace(".", "-")
    out = options.out or Path("runs") / "evaluations" / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    quiet_known_noise()
    try:
        evaluated = load_evaluated(options.model)
        inputs, targets, about = evaluation_data(evaluated, options.data_path, split)
        metrics = evaluate(evaluated, inputs, targets, out, about)
    except EvaluationError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{evaluated.path} ({evaluated.kind}) on {about}:")
    print("\n".join(evaluated.task.evaluation_lines(metrics)))
    print(f"evaluation: {out.resolve()}")
    return out


if __name__ == "__main__":
    gc.freeze()  # the imports live as long as the process: out of the collector's sight
    main()
