"""Refuse, before anything is built, a network that does not meet the contract of model.py.

jsonargparse instantiates ``model.net`` with the keys it accepts and drops the others, so a
network whose constructor lacks ``input_shape`` or ``num_classes`` would be built without
them and fail later, far from the cause. This checks the class itself, in one line.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

REQUIRED = ("input_shape", "num_classes")


class NetworkError(ValueError):
    """``model.net`` names no importable nn.Module, or one that ignores the contract."""


def check_network(net: Any) -> None:
    """``net``: the parsed ``model.net`` (a Namespace with ``class_path``, or None)."""
    class_path = getattr(net, "class_path", None)
    if class_path is None:
        return
    from torch import nn

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
