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


def _net_and_data(family: str, task: str, widths: list[int], n: int = 7, k: int = 4):
    out_dim = k if task == "multiclass" else 1
    net = plugins.get("models", family).build((1, 8, 8), out_dim, {"widths": widths},
                                              generator=torch.Generator().manual_seed(2)).double()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(n, 1, 8, 8, generator=gen, dtype=torch.float64)
    labels = torch.arange(n) % (k if task == "multiclass" else 2)
    return net, x, labels


@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
@pytest.mark.parametrize("widths", [[40], [30, 20], [30, 20, 10]])
def test_chain_jacobian_equals_the_autodiff_blocks(family, task, widths):
    """The closed form against the batched reverse pass: every entry is one product in both, so the blocks are
    equal to the last bit for one and two hidden layers; deeper, the products D_k W_k are summed in another order
    (the tolerance states that floor)."""
    from reconbench.targets.certificate import chain_jacobian

    net, x, labels = _net_and_data(family, task, widths)
    terms = stationarity_terms(net, x, labels, task)
    params = {n: p.detach() for n, p in net.named_parameters()}
    names = list(params)
    ours = chain_jacobian(net, x, labels, task, names)
    reference = dense_jacobian(terms, params, names)
    assert ours is not None and list(ours) == names
    for n in names:
        assert ours[n].shape == reference[n].shape
        assert float(reference[n].abs().max()) > 0, "the fixture must give every block nonzero entries"
        torch.testing.assert_close(ours[n], reference[n], rtol=1e-14, atol=1e-15 * float(reference[n].abs().max()))
        if len(widths) <= 2:
            assert torch.equal(ours[n], reference[n])


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_chain_jacobian_of_an_affine_model(task):
    """One layer, no ReLU: the blocks are the coefficients times the inputs, as autodiff gives them."""
    from reconbench.targets.certificate import chain_jacobian

    out_dim = 4 if task == "multiclass" else 1
    net = plugins.get("models", "affine").build((1, 8, 8), out_dim, {},
                                                generator=torch.Generator().manual_seed(2)).double()
    x = torch.randn(7, 1, 8, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    labels = torch.arange(7) % (4 if task == "multiclass" else 2)
    params = {n: p.detach() for n, p in net.named_parameters()}
    names = list(params)
    ours = chain_jacobian(net, x, labels, task, names)
    reference = dense_jacobian(stationarity_terms(net, x, labels, task), params, names)
    assert ours is not None
    for n in names:
        assert torch.equal(ours[n], reference[n])


def test_chain_jacobian_declines_models_that_are_not_relu_chains():
    from reconbench.targets.certificate import chain_jacobian

    net, x, labels = _net_and_data("mlp", "binary", [20])
    names = [n for n, _ in net.named_parameters()]
    with net.use_activation(torch.nn.functional.softplus):
        assert chain_jacobian(net, x, labels, "binary", names) is None
    conv = plugins.get("models", "conv").build((1, 8, 8), 1, {}).double()
    assert chain_jacobian(conv, x, labels, "binary", [n for n, _ in conv.named_parameters()]) is None


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_term_coefficients_give_the_stationarity_terms(task):
    """C[t] . Phi(x[idx[t]]) is term t of stationarity_terms (written independently: a loop over samples and
    classes)."""
    from reconbench.targets.certificate import term_coefficients

    net, x, labels = _net_and_data("mlp_bias", task, [16], n=5, k=3)
    params = {n: p.detach() for n, p in net.named_parameters()}
    with torch.no_grad():
        out = net(x)
        expected = stationarity_terms(net, x, labels, task)(params)
    coeffs, idx = term_coefficients(labels, task, len(x), out.shape[1], torch.float64)
    assert torch.equal((coeffs * out[idx]).sum(dim=1), expected)
    if task == "multiclass":
        rows = [(i, c) for i in range(len(x)) for c in range(out.shape[1]) if c != int(labels[i])]
        assert idx.tolist() == [i for i, _ in rows]
        assert [int((coeffs[t] == -1).nonzero()) for t in range(len(rows))] == [c for _, c in rows]


@pytest.mark.parametrize("widths", [[40], [30, 20]])
def test_certificate_fits_are_unchanged_by_the_closed_form(monkeypatch, widths):
    """fit_stationarity_many with the closed-form blocks against the same fit with the autodiff blocks: identical
    numbers (the blocks are equal bit for bit, everything after them is the same code)."""
    from reconbench.targets import certificate as cert

    net, x, labels = _net_and_data("mlp", "multiclass", widths)
    init = plugins.get("models", "mlp").build((1, 8, 8), 4, {"widths": widths},
                                              generator=torch.Generator().manual_seed(9)).double()
    others = {"learned": {n: p.detach() - q.detach() for (n, p), q in
                          zip(net.named_parameters(), init.parameters(), strict=True)}}
    fast = cert.fit_stationarity_many(net, x, labels, "multiclass", others)
    calls = []
    monkeypatch.setattr(cert, "chain_jacobian", lambda *a: calls.append(1))  # returns None: the autodiff blocks
    slow = cert.fit_stationarity_many(net, x, labels, "multiclass", others)
    assert calls, "the patched closed form must have been asked"
    for key in ("theta", "learned"):
        a, b = fast[key], slow[key]
        assert 0 < a.relative_residual < 1
        assert (a.relative_residual, a.layer_residuals, a.layer_norm_share, a.method) == \
            (b.relative_residual, b.layer_residuals, b.layer_norm_share, b.method)


def test_certificate_of_a_chain_leaves_the_symbolic_shape_machinery_unimported():
    """The closed form's purpose beyond speed: no autograd call with given output gradients, which imports torch's
    symbolic shapes (and sympy), about a quarter of a second of a newly trained target's run."""
    import subprocess
    import sys

    code = ("import sys, torch\n"
            "from reconbench import plugins\n"
            "from reconbench.targets.certificate import certificate\n"
            "net = plugins.get('models', 'mlp').build((1, 8, 8), 3, {'widths': [20]}).double()\n"
            "x = torch.randn(6, 1, 8, 8, dtype=torch.float64)\n"
            "c = certificate(net, x, torch.tensor([0, 1, 2, 0, 1, 2]), 'multiclass', init=net)\n"
            "assert c['method'] == 'dense-nnls'\n"
            "print(sorted(m for m in ('sympy', 'torch.fx.experimental.symbolic_shapes') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
