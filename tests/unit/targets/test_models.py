"""Model families: homogeneity, swappable activation, architecture conventions."""

from __future__ import annotations

import copy

import pytest
import torch

from reconbench import plugins
from reconbench.errors import ReconbenchError


def build(name: str, spec: dict, shape=(1, 8, 8), out=3, seed=0):
    fam = plugins.get("models", name)
    return fam, fam.build(shape, out, spec, generator=torch.Generator().manual_seed(seed)).double()


def scaled_copy(model, c: float):
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for p in clone.parameters():
            p.mul_(c)
    return clone


@pytest.mark.parametrize("widths", [[20], [20, 30], [10, 10, 10]])
def test_mlp_is_homogeneous_of_degree_depth(widths):
    fam, net = build("mlp", {"widths": widths, "init_scale": 0.3})
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    c = 1.7
    k = fam.homogeneity_degree({"widths": widths})
    assert k == len(widths) + 1
    torch.testing.assert_close(scaled_copy(net, c)(x), c**k * net(x))


def test_affine_and_conv_homogeneity():
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    for name in ("affine", "conv"):
        fam, net = build(name, {} if name == "affine" else {"channels": 4, "hidden": 16, "init_scale": 0.5})
        k = fam.homogeneity_degree({})
        torch.testing.assert_close(scaled_copy(net, 2.0)(x), 2.0**k * net(x))


def test_mlp_bias_is_not_homogeneous():
    fam, net = build("mlp_bias", {"widths": [16]})
    assert fam.homogeneity_degree({"widths": [16]}) is None
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    assert not torch.allclose(scaled_copy(net, 2.0)(x), 8.0 * net(x))


def test_mlp_reference_layout_and_init():
    fam, net = build("mlp", {"widths": [50, 40], "init_scale": 1e-4}, shape=(1, 28, 28), out=1)
    assert list(net.state_dict()) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.2.weight"]
    assert net.layers[0].weight.std() < 3e-4  # N(0,1) * 1e-4
    bound = 1 / 50**0.5  # default PyTorch init for the others
    assert net.layers[1].weight.abs().max() <= bound and net.layers[1].weight.std() > 0.1 * bound


def test_swapped_activation_changes_the_forward():
    _, net = build("mlp", {"widths": [20]})
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    base = net(x)
    with net.use_activation(torch.tanh):
        assert not torch.allclose(net(x), base)
    torch.testing.assert_close(net(x), base)


def test_unknown_model_option_is_clear():
    with pytest.raises(ReconbenchError, match="no option 'width'.*widths"):
        build("mlp", {"width": [10]})
