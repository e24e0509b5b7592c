"""The plain network: no Lightning import, so it can be exported, tested and reused alone.

Preprocessing lives inside the network (``Standardize``), so a checkpoint or an export
takes raw inputs and can never drift from what training saw.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Standardize(nn.Module):
    """(x - mean) / std with the statistics kept as buffers, saved in every state_dict."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("std", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class MLPClassifier(nn.Module):
    """Raw features (B, in_features) -> class logits (B, num_classes)."""

    def __init__(
        self,
        in_features: int = 64,
        num_classes: int = 10,
        hidden_sizes: Sequence[int] = (256, 256),
        dropout: float = 0.3,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            activation_checkpointing: in training, store only the inputs of the hidden
                layers and recompute their activations in the backward pass (less memory,
                ~1/3 more compute, the same gradients). Evaluation and export never do.
        """
        super().__init__()
        self.activation_checkpointing = activation_checkpointing
        self.standardize = Standardize(in_features)
        layers: list[nn.Module] = []
        width = in_features
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        # nn.Sequential, never a plain Python list: layers in a list are not registered,
        # so they are neither trained, moved to the device, nor saved.
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming init for the ReLU layers; a near-zero head so the first logits are the bias."""
        for layer in self.body:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(self.head.bias)

    @torch.no_grad()
    def set_input_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Use training-split statistics; a constant feature (std 0) is only centred."""
        self.standardize.mean.copy_(mean)
        self.standardize.std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    @torch.no_grad()
    def set_class_priors(self, priors: torch.Tensor) -> None:
        """Output bias = log class frequency: the first loss is the label entropy, not noise."""
        self.head.bias.copy_(priors.clamp_min(1e-8).log())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.standardize(x)  # (B, in_features)
        if self.activation_checkpointing and self.training and torch.is_grad_enabled():
            # Per hidden layer (Linear, ReLU, Dropout): only its input is kept. Non-reentrant:
            # works with autocast; the RNG state is replayed, so dropout draws the same mask.
            for start in range(0, len(self.body), 3):
                h = checkpoint(self.body[start : start + 3], h, use_reentrant=False)
        else:
            h = self.body(h)
        return self.head(h)  # (B, num_classes)
