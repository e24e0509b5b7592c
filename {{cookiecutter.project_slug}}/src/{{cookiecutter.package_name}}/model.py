"""Networks: plain ``nn.Module``s with no Lightning import, so they export, test and reuse alone.

The contract every network meets (the shipped ones here, or your own in any file):
    - it is a plain ``nn.Module``;
    - its constructor accepts ``input_shape: tuple[int, ...]`` (one sample's shape, e.g.
      ``(64,)`` for 64 features or ``(1, 8, 8)`` for a grayscale 8x8 image) and
      ``num_classes: int``; the command line fills both in from the data, never by hand;
    - its ``forward`` maps a float batch ``(B, *input_shape)`` to logits ``(B, num_classes)``.
Nothing else is called on it. What every network needs around it, input standardisation
from training-split statistics and a class-prior output bias, is ``Classifier``'s job: the
LightningModule wraps any network in one, and every export is that whole wrapper, so serving
takes raw inputs and cannot drift from training.

Choose a network in the config (``model.net``) or on the command line:
    python train.py --config configs/cnn.yaml
    python train.py --model.net mynet.TinyNet --model.net.init_args.width 64
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def stats_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    """Shape of the standardisation statistics: one per feature for flat inputs (F,), one
    per channel for images and other (C, ...) inputs, broadcastable against a sample."""
    if len(input_shape) == 1:
        return (input_shape[0],)
    return (input_shape[0],) + (1,) * (len(input_shape) - 1)


class Standardize(nn.Module):
    """(x - mean) / std with the statistics kept as buffers, saved in every state_dict."""

    mean: torch.Tensor  # buffers (register_buffer): declared for type checkers
    std: torch.Tensor

    def __init__(self, input_shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(stats_shape(input_shape)))
        self.register_buffer("std", torch.ones(stats_shape(input_shape)))

    @torch.no_grad()
    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Training-split statistics; a constant feature or channel (std 0) is only centred."""
        self.mean.copy_(mean.view_as(self.mean))
        std = std.view_as(self.std)
        self.std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class Classifier(nn.Module):
    """Raw inputs -> standardise -> any network -> + log class priors: what is exported.

    The prior bias is a buffer (log of the training-split class frequencies, zero when off):
    the first loss is the label entropy instead of noise, whatever the network's last layer.
    """

    log_prior: torch.Tensor  # a buffer (register_buffer): declared for type checkers

    def __init__(self, net: nn.Module, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        self.standardize = Standardize(input_shape)
        self.net = net
        self.register_buffer("log_prior", torch.zeros(num_classes))

    @torch.no_grad()
    def set_class_priors(self, priors: torch.Tensor) -> None:
        self.log_prior.copy_(priors.clamp_min(1e-8).log())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.standardize(x)) + self.log_prior  # (B, num_classes)


class MLPClassifier(nn.Module):
    """Any input, flattened -> ReLU hidden layers with dropout -> class logits. The default."""

    def __init__(
        self,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_classes: int = 10,
        hidden_sizes: Sequence[int] = (256, 256),
        dropout: float = 0.3,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            input_shape: one sample's shape; filled in from the data.
            num_classes: number of classes; filled in from the data.
            hidden_sizes: widths of the hidden ReLU layers.
            dropout: dropout after each hidden layer.
            activation_checkpointing: in training, store only the inputs of the hidden
                layers and recompute their activations in the backward pass (less memory,
                ~1/3 more compute, the same gradients). Evaluation and export never do.
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
        self.head = nn.Linear(width, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming init for the ReLU layers; a near-zero head so the first logits are the
        wrapper's class-prior bias."""
        for layer in self.body:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)  # (B, *input_shape) -> (B, F)
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            # Per hidden layer (Linear, ReLU, Dropout): only its input is kept. Non-reentrant:
            # works with autocast; the RNG state is replayed, so dropout draws the same mask.
            for start in range(0, len(self.body), 3):
                h = checkpoint(self.body[start : start + 3], h, use_reentrant=False)
        else:
            h = self.body(h)
        return self.head(h)  # (B, num_classes)


class ConvClassifier(nn.Module):
    """Images (B, C, H, W) -> conv blocks -> average pool to a small grid -> class logits.

    Each block is two 3x3 convolutions with group norm and ReLU; every block but the last
    halves the resolution with a max pool. Adaptive pooling to ``pool_size`` x ``pool_size``
    makes it work at any image size and keeps where strokes are: global pooling (1) lost
    that and reached 0.30 test accuracy where a 4 x 4 grid reached 0.97 (16 x 16 digit
    images, 400 samples, 10 epochs).
    Group norm, not batch norm: it keeps no running statistics, so it behaves the same at
    any batch size (low-memory's batches of 16, DDP shards, predict's single images) and a
    recomputed block (activation checkpointing) cannot update statistics twice.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_classes: int = 10,
        channels: Sequence[int] = (32, 64),
        dropout: float = 0.2,
        pool_size: int = 4,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            input_shape: (C, H, W) of one image; filled in from the data.
            num_classes: number of classes; filled in from the data.
            channels: output channels of each block.
            dropout: dropout before the last layer.
            pool_size: the last feature map is averaged to pool_size x pool_size.
            activation_checkpointing: recompute each block's activations in the backward
                pass instead of storing them (training only).
        """
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(
                f"ConvClassifier takes images (C, H, W), the data gives samples of shape "
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
        last = nn.Linear(width * pool_size**2, num_classes)
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
        return self.head(h)  # (B, num_classes)
