"""The networks every contract test runs over: both shipped ones, small, and a user's own.

``TinyUserNet`` stands for a network written in a file of the user's (here: tests/), never
under src/: it meets the contract of model.py and nothing else, and the module, training,
export, predict and resume must all work with it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from {{ cookiecutter.package_name }}.networks import CNN, MLP

KINDS = ["mlp", "cnn", "user"]
# As `--model.net ...` takes them: a class path and init_args.
CLASS_PATHS: dict[str, tuple[str, dict[str, Any]]] = {
    "mlp": ("{{ cookiecutter.package_name }}.networks.MLP", {"hidden_sizes": [32]}),
    "cnn": ("{{ cookiecutter.package_name }}.networks.CNN", {"channels": [8, 16]}),
    "user": ("tests.networks.TinyUserNet", {"width": 16}),
}


class TinyUserNet(nn.Module):
    """A user's network: flatten, one tanh layer, logits. Not a subclass of anything ours."""

    def __init__(self, input_shape: tuple[int, ...], num_outputs: int, width: int = 16) -> None:
        super().__init__()
        self.hidden = nn.Linear(math.prod(input_shape), width)
        self.out = nn.Linear(width, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x.flatten(1))))


def make_net(kind: str, input_shape: tuple[int, ...] = (1, 8, 8), num_outputs: int = 10):
    """A small network of ``kind``, built as the CLI builds it (shape and classes given)."""
    if kind == "mlp":
        return MLP(input_shape, num_outputs, hidden_sizes=(32,))
    if kind == "cnn":
        return CNN(input_shape, num_outputs, channels=(8, 16))
    return TinyUserNet(input_shape, num_outputs)


def net_args(kind: str) -> list[str]:
    """Command-line options that choose the network ``kind`` (small) for train.py."""
    class_path, init_args = CLASS_PATHS[kind]
    args = ["--model.net", class_path]
    for key, value in init_args.items():
        args += [f"--model.net.init_args.{key}", str(value)]
    return args


class NaNAfter(TinyUserNet):
    """A network whose training outputs turn NaN at its ``bad_call``-th training forward: the
    loss goes NaN as with a learning rate far too high, but at a known step."""

    def __init__(self, input_shape: tuple[int, ...], num_outputs: int, bad_call: int = 3) -> None:
        super().__init__(input_shape, num_outputs)
        self.bad_call = bad_call
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x)
        if self.training:
            self.calls += 1
            if self.calls >= self.bad_call:
                return logits * float("nan")
        return logits


class Squeezed(TinyUserNet):
    """A regression network that drops its output's last dimension: (B,) against targets
    (B, 1), the shape pitfall of regression code."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).squeeze(-1)
