"""Per-batch callback hooks that do nothing are not called.

Lightning calls every per-batch hook of every callback on every batch, whether the callback
implements it or not, each call inside a profiler context with a name formatted for it
(`_call_callback_hooks` in lightning/pytorch/trainer/call.py). The default config's 10
callbacks implement 7 of the 60 calls of each training step; the rest are the base class's
no-ops. That function skips an attribute that is not callable, so setting each inherited
no-op hook to None on the callback object saves them: an epoch of the default model took
0.93-0.97x the time (BENCHMARKS.md), with the same weights. Our own code: Lightning has no
option for it. Only the per-batch hooks are touched, and only where the callback object
inherits Callback's own method: a hook a class or object defines (a LambdaCallback's) is
kept, and so is every hook of an object that takes no new attribute (a frozen dataclass).
"""

from __future__ import annotations

from collections.abc import Iterable

from lightning.pytorch.callbacks import Callback

PER_BATCH_HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
)


def skip_no_op_batch_hooks(callbacks: Iterable[Callback]) -> int:
    """Set the per-batch hooks that each callback inherits unchanged from Callback to None
    on that object (its class keeps them); return how many. A callback added later, like a
    sweep trial's pruning callback, is called as usual."""
    skipped = 0
    for callback in callbacks:
        for name in PER_BATCH_HOOKS:
            hook = getattr(callback, name, None)
            if getattr(hook, "__func__", None) is not getattr(Callback, name):
                continue
            try:
                setattr(callback, name, None)
            except (AttributeError, TypeError):  # frozen: it is called, as without this
                break
            skipped += 1
    return skipped
