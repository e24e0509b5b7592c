from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from {{ cookiecutter.package_name }}.module import LitModel
from {{ cookiecutter.package_name }}.tasks.classification import Classification

from .conftest import fake_trainer
from .networks import KINDS, make_net


@pytest.mark.parametrize("kind", KINDS)
def test_hyperparameters_are_plain_values_whatever_the_network(kind: str) -> None:
    """A network object is never pickled into the hyper-parameters (weights-only loading)."""
    module = LitModel(net=make_net(kind))
    assert "net" not in module.hparams
    for key, value in module.hparams.items():
        assert isinstance(value, (int, float, str, bool, tuple, list, type(None))), key


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_of_any_network_gives_a_finite_loss_and_gradients(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = LitModel(net=make_net(kind), input_shape=(1, 8, 8), num_outputs=10)
    monkeypatch.setattr(module, "log", lambda *args, **kwargs: None)  # no Trainer here
    x, y = torch.rand(6, 1, 8, 8) * 16, torch.arange(6)
    loss = module.training_step((x, y), 1)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in module.model.net.parameters())
    assert module(x).shape == (6, 10)


def test_class_prior_bias_can_be_turned_off() -> None:
    datamodule = SimpleNamespace(
        input_stats=lambda: (torch.zeros(1), torch.ones(1)),
        train_targets=lambda: torch.arange(10),  # one sample of each class
    )
    for enabled, expected in ((True, torch.full((10,), 0.1).log()), (False, torch.zeros(10))):
        module = LitModel(class_prior_bias=enabled)
        module.trainer = fake_trainer(datamodule=datamodule)
        module.setup("fit")
        torch.testing.assert_close(module.model.output.log_prior, expected)


def test_learning_rate_warms_up_then_decays_to_zero() -> None:
    module = LitModel(lr=1e-2, warmup_fraction=0.1)
    module.trainer = fake_trainer(estimated_stepping_batches=100)
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
    module = LitModel()
    module.trainer = fake_trainer(estimated_stepping_batches=10)
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
        Classification.check_batch(torch.zeros(4, 1, 8, 8), torch.zeros(4, 10), labels)


def test_integer_inputs_fail_with_the_fix() -> None:
    with pytest.raises(TypeError, match="float"):
        Classification.check_batch(
            torch.zeros(4, 64, dtype=torch.long), torch.zeros(4, 10), torch.zeros(4).long()
        )


def test_epoch_loss_is_weighted_by_batch_size() -> None:
    """A short last batch counts for its samples, not as a whole batch."""
    metrics: Any = LitModel().val_metrics
    loss = metrics["loss"]
    loss.update(torch.tensor(1.0), weight=64)
    loss.update(torch.tensor(3.0), weight=14)
    assert loss.compute().item() == pytest.approx((64 * 1.0 + 14 * 3.0) / 78)
