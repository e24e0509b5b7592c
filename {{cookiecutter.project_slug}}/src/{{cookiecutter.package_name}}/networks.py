"""Networks: plain ``nn.Module``s with no Lightning import, so they export, test and reuse alone.

The contract of every network, shipped or your own (`--model.net mynet.TinyNet`): its
constructor takes ``input_shape: tuple[int, ...]`` (one sample's shape: ``(64,)`` or
``(1, 8, 8)``) and ``num_outputs: int`` (the classes, or the regression targets), both filled in
from the data, and its ``forward`` maps a float batch ``(B, *input_shape)`` to ``(B,
num_outputs)``: class logits, or standardised target values. The input standardisation and the
task's output layer are added around it (module.InferenceModel), so every export takes raw
inputs and answers in the targets' own units.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch
from jsonargparse.typing import ClosedUnitInterval, PositiveInt
from torch import nn
from torch.utils.checkpoint import checkpoint

REQUIRED = ("input_shape", "num_outputs")


class NetworkError(ValueError):
    """``model.net`` names no importable nn.Module, or one that breaks the contract."""


class MLP(nn.Module):
    """Any input, flattened -> ReLU hidden layers with dropout -> outputs. The default."""

    def __init__(
        self,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_outputs: int = 10,
        hidden_sizes: Sequence[PositiveInt] = (256, 256),
        dropout: ClosedUnitInterval = 0.3,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            hidden_sizes: widths of the hidden ReLU layers ([] for a linear model).
            dropout: dropout after each hidden layer.
            activation_checkpointing: in training, keep only each hidden layer's input and
                recompute its activations in the backward pass (less memory, more compute).
        """
        super().__init__()
        self.activation_checkpointing = activation_checkpointing
        layers: list[nn.Module] = []
        width = math.prod(input_shape)
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        # nn.Sequential, never a plain Python list: layers in a list are not registered,
        # so they are neither trained, moved to the device, nor saved.
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_outputs)
        for layer in self.body:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        # A near-zero head: the first logits are the class-prior bias added around the network.
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)  # (B, *input_shape) -> (B, F)
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            for start in range(0, len(self.body), 3):  # (Linear, ReLU, Dropout) at a time
                h = checkpoint(self.body[start : start + 3], h, use_reentrant=False)
        else:
            h = self.body(h)
        return self.head(h)  # (B, num_outputs)


class CNN(nn.Module):
    """Images (B, C, H, W) -> blocks of two 3x3 convolutions (group norm, ReLU), each but the
    last halving the resolution -> average pool to a small grid (any image size, and where
    strokes are is kept) -> outputs. Group norm, not batch norm: the same behaviour at
    any batch size (DDP shards, single images, recomputation)."""

    def __init__(
        self,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_outputs: int = 10,
        channels: Sequence[PositiveInt] = (32, 64),
        dropout: ClosedUnitInterval = 0.2,
        pool_size: PositiveInt = 4,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            channels: output channels of each block.
            dropout: dropout before the last layer.
            pool_size: the last feature map is averaged to pool_size x pool_size.
            activation_checkpointing: recompute each block's activations in the backward
                pass instead of storing them (training only).
        """
        super().__init__()
        if len(input_shape) != 3:
            raise NetworkError(
                f"CNN takes images (C, H, W), the data gives samples of shape "
                f"{tuple(input_shape)}: use an image folder, or the MLP for flat features."
            )
        self.activation_checkpointing = activation_checkpointing
        blocks: list[nn.Module] = []
        width = input_shape[0]
        for index, out in enumerate(channels):
            layers: list[nn.Module] = []
            for conv_in in (width, out):
                layers += [
                    nn.Conv2d(conv_in, out, 3, padding=1, bias=False),
                    nn.GroupNorm(math.gcd(8, out), out),
                    nn.ReLU(),
                ]
            if index < len(channels) - 1:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            blocks.append(nn.Sequential(*layers))
            width = out
        self.blocks = nn.ModuleList(blocks)
        last = nn.Linear(width * pool_size**2, num_outputs)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(pool_size), nn.Flatten(), nn.Dropout(dropout), last
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.normal_(last.weight, std=1e-3)
        nn.init.zeros_(last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x  # (B, C, H, W)
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            h = checkpoint(block, h, use_reentrant=False) if recompute else block(h)
        return self.head(h)  # (B, num_outputs)


def check_network(net: Any) -> None:
    """Refuse, before it is built, a ``model.net`` (the parsed Namespace with ``class_path``)
    that is no nn.Module or lacks a contract argument: jsonargparse would drop the missing
    ones silently and the network would fail far from the cause."""
    class_path = getattr(net, "class_path", None)
    if class_path is None:
        return
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise NetworkError(f"model.net {class_path} cannot be imported ({error}).") from None
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise NetworkError(f"model.net {class_path} is not an nn.Module subclass.")
    parameters = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [name for name in REQUIRED if name not in parameters and not takes_any]
    if "num_outputs" in missing and "num_classes" in parameters:
        raise NetworkError(
            f"model.net {class_path} takes num_classes: rename it num_outputs (the classes, "
            "or the regression targets). See the contract in networks.py."
        )
    if missing:
        raise NetworkError(
            f"model.net {class_path} must accept {' and '.join(missing)} in __init__ "
            "(filled in from the data): def __init__(self, input_shape: tuple[int, ...], "
            "num_outputs: int, ...). See the contract in networks.py."
        )


def check_network_output(net: nn.Module, input_shape: tuple[int, ...], num_outputs: int) -> None:
    """One batch of zeros through ``net`` (eval mode, no gradients) must give (B,
    num_outputs). An exception inside forward keeps its traceback: it is in your code."""
    training = net.training
    try:
        with torch.no_grad():
            out = net.eval()(torch.zeros(2, *input_shape))
    finally:
        net.train(training)
    expected = (2, num_outputs)
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if shape != expected:
        raise NetworkError(
            f"model.net {type(net).__name__} maps a batch of shape {(2, *input_shape)} to "
            f"{shape}, expected {expected}: its forward must return (batch, num_outputs). "
            "See the contract in networks.py."
        )
