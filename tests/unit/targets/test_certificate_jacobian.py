"""The certificate's dense Jacobian against torch.func.jacrev, an independent route to the same blocks."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev

from reconbench import plugins
from reconbench.targets.certificate import dense_jacobian, stationarity_terms


@pytest.mark.parametrize(("family", "task", "outputs"), [("mlp", "binary", 1), ("mlp", "multiclass", 3),
                                                         ("mlp", "regression", 1), ("mlp_bias", "multiclass", 3)])
def test_dense_jacobian_equals_jacrev(family, task, outputs):
    torch.manual_seed(0)
    net = plugins.get("models", family).build((1, 8, 8), outputs, {"widths": [40, 30]}).double()
    x = torch.randn(6, 1, 8, 8, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2]) if task == "multiclass" else torch.tensor([0, 1, 0, 1, 1, 0])
    terms = stationarity_terms(net, x, labels, task)
    params = {n: p.detach() for n, p in net.named_parameters()}
    names = list(params)
    ours = dense_jacobian(terms, params, names)
    reference = jacrev(terms)(params)
    assert list(ours) == names
    for n in names:
        assert ours[n].shape == reference[n].shape
        # the same batched backward pass: equal to the last bit (the tolerance only states the claim's floor)
        torch.testing.assert_close(ours[n], reference[n], rtol=1e-14, atol=1e-15)
        assert torch.equal(ours[n], reference[n])
