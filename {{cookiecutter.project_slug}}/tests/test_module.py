from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_sum

from {{ cookiecutter.package_name }}.module import LitClassifier, all_reduce_sum, check_batch


def test_hyperparameters_are_plain_values() -> None:
    module = LitClassifier()
    for key, value in module.hparams.items():
        assert isinstance(value, (int, float, str, bool, tuple, list, type(None))), key


def test_learning_rate_warms_up_then_decays_to_zero() -> None:
    module = LitClassifier(lr=1e-2, warmup_fraction=0.1)
    module.trainer = SimpleNamespace(estimated_stepping_batches=100)
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert config["lr_scheduler"]["interval"] == "step"
    rates = []
    for _ in range(100):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    peak = rates.index(max(rates))
    assert peak == 10 and max(rates) == pytest.approx(1e-2)
    assert all(a < b for a, b in pairwise(rates[: peak + 1]))
    assert all(a >= b for a, b in pairwise(rates[peak:]))
    assert rates[-1] < 1e-4


def test_weight_decay_spares_biases_and_statistics() -> None:
    module = LitClassifier()
    module.trainer = SimpleNamespace(estimated_stepping_batches=10)
    decayed, spared = module.configure_optimizers()["optimizer"].param_groups
    assert decayed["weight_decay"] > 0 and spared["weight_decay"] == 0
    assert all(p.ndim == 2 for p in decayed["params"])
    assert all(p.ndim == 1 for p in spared["params"])


@pytest.mark.parametrize(
    ("labels", "error", "message"),
    [
        (torch.zeros(4, 1, dtype=torch.long), ValueError, r"shape \[B\]"),
        (torch.zeros(4), TypeError, "int64"),
    ],
)
def test_bad_label_batches_fail_with_the_fix(
    labels: torch.Tensor, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        check_batch(torch.zeros(4, 64), labels)


def test_integer_inputs_fail_with_the_fix() -> None:
    with pytest.raises(TypeError, match="float"):
        check_batch(torch.zeros(4, 64, dtype=torch.long), torch.zeros(4, dtype=torch.long))


def test_metrics_synced_by_one_all_reduce_hold_only_sums() -> None:
    """all_reduce_sum is right for summed states only: a metric added with another reduction
    (a list of predictions, a max) must keep torchmetrics' own gather."""
    metrics = [m for m in LitClassifier().modules() if isinstance(m, Metric)]
    assert len(metrics) == 7
    for metric in metrics:
        assert metric.dist_sync_fn is all_reduce_sum
        assert set(metric._reductions.values()) == {dim_zero_sum}, type(metric).__name__


def test_epoch_loss_is_weighted_by_batch_size() -> None:
    """A short last batch counts for its samples, not as a whole batch."""
    loss = LitClassifier().val_loss
    loss.update(torch.tensor(1.0), weight=64)
    loss.update(torch.tensor(3.0), weight=14)
    assert loss.compute().item() == pytest.approx((64 * 1.0 + 14 * 3.0) / 78)
