"""The shipped networks and what every network is wrapped in: standardisation and the class
prior, carried in the weights."""

import pytest
import torch

from {{ cookiecutter.package_name }}.module import InferenceModel, Standardize
from {{ cookiecutter.package_name }}.networks import CNN, MLP, NetworkError
from {{ cookiecutter.package_name }}.tasks.classification import ClassPriorBias

from .networks import KINDS, make_net


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("input_shape", [(1, 8, 8), (3, 16, 12)], ids=["gray-8x8", "rgb-16x12"])
def test_every_network_maps_a_batch_to_logits(kind: str, input_shape: tuple[int, ...]) -> None:
    net = make_net(kind, input_shape, num_outputs=7)
    assert net(torch.randn(5, *input_shape)).shape == (5, 7)
    assert net(torch.randn(1, *input_shape)).shape == (1, 7), "a single sample works too"


def test_mlp_takes_flat_features_and_the_cnn_refuses_them() -> None:
    assert MLP((13,), 3)(torch.randn(4, 13)).shape == (4, 3)
    with pytest.raises(NetworkError, match=r"CNN takes images \(C, H, W\)"):
        CNN((13,), 3)


@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_receives_a_gradient(kind: str) -> None:
    model = InferenceModel(make_net(kind), (1, 8, 8), ClassPriorBias(10))
    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 1, 8, 8)), torch.arange(8))
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} received no gradient"
        assert parameter.grad.abs().sum() > 0, f"{name} received an all-zero gradient"


def test_hidden_layers_are_registered() -> None:
    model = MLP(hidden_sizes=(32, 16))
    linear_layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linear_layers) == 3
    assert sum(p.numel() for p in model.parameters()) == 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10


def test_standardize_per_feature_and_only_centres_constant_features() -> None:
    standardize = Standardize((3,))
    standardize.set_stats(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 0.0]))
    out = standardize(torch.tensor([[3.0, 2.0, 5.0]]))
    assert torch.allclose(out, torch.tensor([[1.0, 0.0, 2.0]]))


def test_standardize_images_per_channel() -> None:
    standardize = Standardize((2, 4, 4))
    assert standardize.mean.shape == (2, 1, 1)
    standardize.set_stats(torch.tensor([1.0, -1.0]), torch.tensor([2.0, 0.5]))
    images = torch.stack([torch.full((4, 4), 3.0), torch.full((4, 4), 0.0)])[None]
    out = standardize(images)
    assert torch.equal(out[0, 0], torch.full((4, 4), 1.0))
    assert torch.equal(out[0, 1], torch.full((4, 4), 2.0))


@pytest.mark.parametrize("kind", KINDS)
def test_preprocessing_travels_with_the_weights_whatever_the_network(kind: str) -> None:
    state = InferenceModel(make_net(kind), (1, 8, 8), ClassPriorBias(10)).state_dict()
    assert {"standardize.mean", "standardize.std", "output.log_prior"} <= state.keys()


def test_class_priors_set_the_first_predictions() -> None:
    model = InferenceModel(MLP(num_outputs=3), (1, 8, 8), ClassPriorBias(3)).eval()
    priors = torch.tensor([0.5, 0.3, 0.2])
    model.output.set_priors(priors)
    with torch.inference_mode():
        probabilities = model(torch.randn(16, 1, 8, 8)).softmax(dim=-1)
    assert torch.allclose(probabilities.mean(dim=0), priors, atol=0.02)


def test_hidden_layers_use_kaiming_scale() -> None:
    torch.manual_seed(0)
    model = MLP(hidden_sizes=(2048,))
    std = model.state_dict()["body.0.weight"].std().item()
    assert abs(std - (2 / 64) ** 0.5) < 0.01


def test_activation_checkpointing_recomputes_in_training_with_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = MLP(hidden_sizes=(32, 32, 32), dropout=0.3)
    checkpointed = MLP(hidden_sizes=(32, 32, 32), dropout=0.3, activation_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(16, 1, 8, 8)
    gradients: list[dict[str, torch.Tensor | None]] = []
    linear_calls = []
    for model in (plain, checkpointed):
        calls: list[int] = []
        for index, layer in enumerate(model.body):
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(lambda *_, i=index, calls=calls: calls.append(i))
        torch.manual_seed(1)  # the same dropout masks; the recomputation must replay them
        model.train()(x).square().sum().backward()
        gradients.append({name: p.grad for name, p in model.named_parameters()})
        linear_calls.append(sorted(calls))
    # Checkpointed: every hidden layer runs forward once more during the backward pass.
    assert linear_calls == [[0, 3, 6], [0, 0, 3, 3, 6, 6]]
    for name, grad in gradients[0].items():
        other = gradients[1][name]
        assert grad is not None and other is not None and torch.equal(grad, other), name
    with torch.no_grad():  # evaluation (and export) never checkpoint
        assert torch.equal(checkpointed.eval()(x), plain.eval()(x))


def test_cnn_activation_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = CNN(channels=(8, 16), dropout=0.0)
    checkpointed = CNN(channels=(8, 16), dropout=0.0, activation_checkpointing=True)
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(4, 1, 8, 8)
    for model in (plain, checkpointed):
        model.train()(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name)
