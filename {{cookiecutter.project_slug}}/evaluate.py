"""Evaluate a trained model without training: metrics.json and a confusion matrix.

To run:
    python evaluate.py runs/.../checkpoints/best-epoch=41.ckpt         # its run's test split
    python evaluate.py runs/.../export/model.pt2                       # an export, the same
    python evaluate.py runs/.../export/model.pt2 --data.path new.csv   # all of other data
    python evaluate.py MODEL --split val                               # test, val, train, all

A checkpoint or an exported model (TorchScript, int8, torch.export, ONNX; with the
metadata.json the export wrote beside it) is evaluated on the data it was trained on, split
as in training, or on any --data.path (a file or an image folder, read as its training data
was; by default every sample of it). metrics.json holds the accuracy, the loss, and each
class's precision, recall, F1 and support; confusion_matrix.png the counts. The last line
names the folder.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from {{ cookiecutter.package_name }}.evaluation import (
    SPLITS,
    EvaluationError,
    evaluate,
    evaluation_data,
    load_evaluated,
    write_evaluation,
)
from {{ cookiecutter.package_name }}.runtime import freeze_imports, quiet_known_noise


def main(args: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a .ckpt checkpoint or an exported model")
    parser.add_argument(
        "--data.path",
        dest="data_path",
        metavar="PATH",
        help="other data (.csv, .npz, image folder); default: the model's own data",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        help="which samples: test (default for the model's own data) or all (default for "
        "--data.path), val, train",
    )
    parser.add_argument(
        "--out", type=Path, help="the output folder (default: runs/evaluations/<time>-<model>)"
    )
    options = parser.parse_args(args)
    split = options.split or ("all" if options.data_path else "test")
    quiet_known_noise()
    try:
        evaluated = load_evaluated(options.model)
        features, labels, description = evaluation_data(evaluated, options.data_path, split)
        metrics, confusion = evaluate(evaluated, features, labels)
    except EvaluationError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    stem = options.model.name.replace(".", "-")
    out = options.out or Path("runs") / "evaluations" / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    write_evaluation(out, evaluated, description, metrics, confusion)
    print(f"{evaluated.path} ({evaluated.kind}) on {description}:")
    print(f"accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}")
    worst = min(metrics["per_class"].items(), key=lambda item: item[1]["f1"])
    print(f"lowest F1: class {worst[0]} {worst[1]['f1']:.4f} (each class in metrics.json)")
    print(f"evaluation: {out.resolve()}")
    return out


if __name__ == "__main__":
    freeze_imports()  # a script: nothing of an earlier run is alive to keep
    main()
