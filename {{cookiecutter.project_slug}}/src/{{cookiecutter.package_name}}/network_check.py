"""Refuse, before training, a network that does not meet the contract of model.py.

jsonargparse instantiates ``model.net`` with the keys it accepts and drops the others, so a
network whose constructor lacks ``input_shape`` or ``num_classes`` would be built without
them and fail later, far from the cause: ``check_network`` checks the class before it is
built, ``check_network_output`` one forward pass after, each failure in one line. (An
exception inside your forward keeps its traceback: it points into your code.)
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch
from torch import nn

REQUIRED = ("input_shape", "num_classes")


class NetworkError(ValueError):
    """``model.net`` names no importable nn.Module, or one that ignores the contract."""


def check_network(net: Any) -> None:
    """``net``: the parsed ``model.net`` (a Namespace with ``class_path``, or None)."""
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
    if missing:
        raise NetworkError(
            f"model.net {class_path} must accept {' and '.join(missing)} in __init__ "
            "(filled in from the data): def __init__(self, input_shape: tuple[int, ...], "
            "num_classes: int, ...). See the contract in model.py."
        )


def check_network_output(net: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> None:
    """One batch of zeros through ``net`` (eval mode, no gradients) must give logits
    (B, num_classes)."""
    training = net.training
    try:
        with torch.no_grad():
            out = net.eval()(torch.zeros(2, *input_shape))
    finally:
        net.train(training)
    expected = (2, num_classes)
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if shape != expected:
        raise NetworkError(
            f"model.net {type(net).__name__} maps a batch of shape {(2, *input_shape)} to "
            f"{shape}, expected logits of shape {expected}: its forward must return "
            "(batch, num_classes). See the contract in model.py."
        )
