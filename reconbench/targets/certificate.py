"""The convergence certificate: how well the trained weights satisfy the stationarity condition at given inputs.

For a model trained to a KKT / stationary point, theta = sum_i lambda_i grad_theta s_i(x_i; theta) for per-sample
terms s_i (binary: y_i Phi; multiclass: Phi_y - Phi_j for every wrong class j; regression: Phi). We fit lambda by
(non-negative, for classification) least squares, matrix-free through Jacobian-vector products, and report the
relative residual ||theta - J^T lambda||^2 / ||theta||^2 (docs/method/targets.md#convergence-certificate). The residual at the
true training images should be far below the residual at random inputs of the same scale.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.autograd.functional import jacobian
from torch.func import functional_call, jvp, vjp

from reconbench.nets import TargetNet
from reconbench.targets.chain_gd import chain_layers


def stationarity_terms(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str
                       ) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """params -> the vector of per-sample terms s whose gradients span the stationarity condition."""

    def terms(params: dict[str, torch.Tensor]) -> torch.Tensor:
        out = functional_call(model, params, (x,))
        if task == "binary":
            return (2.0 * labels.to(out.dtype) - 1.0) * out.reshape(-1)
        if task == "regression":
            return out.reshape(-1)
        lab = labels.long()
        own = out.gather(1, lab[:, None])
        mask = torch.ones_like(out, dtype=torch.bool).scatter(1, lab[:, None], False)
        return (own - out)[mask]  # (n * (K - 1),): one term per (sample, wrong class)

    return terms


def dense_jacobian(terms: Callable[[dict[str, torch.Tensor]], torch.Tensor], params: dict[str, torch.Tensor],
                   names: list[str]) -> dict[str, torch.Tensor]:
    """d terms / d params, one block (terms x parameter shape) per name, by one vectorised reverse pass.

    The same batched backward pass as ``torch.func.jacrev`` (the blocks are equal bit for bit), through
    ``torch.autograd.functional.jacobian``, which does not import torch._dynamo (jacrev's backward does, a
    second or more of a run's start-up on this CPU).
    """
    def of_tensors(*tensors: torch.Tensor) -> torch.Tensor:
        return terms(dict(zip(names, tensors, strict=True)))

    blocks = jacobian(of_tensors, tuple(params[n] for n in names), vectorize=True)
    return dict(zip(names, blocks, strict=True))


def term_coefficients(labels: torch.Tensor, task: str, n: int, k: int, dtype: torch.dtype
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, idx): term t of :func:`stationarity_terms` is C[t] . Phi(x[idx[t]]) (multiclass: e_y - e_j for each wrong
    class j in increasing order, sample by sample; binary: y in {-1, +1}; regression: 1)."""
    if task == "binary":
        return (2.0 * labels.to(dtype) - 1.0)[:, None], torch.arange(n)
    if task == "regression":
        return torch.ones(n, 1, dtype=dtype), torch.arange(n)
    lab = labels.long()
    wrong = torch.arange(k).expand(n, k)[torch.arange(k)[None, :] != lab[:, None]]  # (n (k - 1),), sample-major
    idx = torch.arange(n).repeat_interleave(k - 1)
    rows = torch.arange(len(idx))
    coeffs = torch.zeros(len(idx), k, dtype=dtype)
    coeffs[rows, lab[idx]] = 1.0
    coeffs[rows, wrong] = -1.0
    return coeffs, idx


def chain_jacobian(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str, names: list[str]
                   ) -> dict[str, torch.Tensor] | None:
    """The blocks of :func:`dense_jacobian` in closed form for a ReLU chain of linear layers holding every parameter
    (None for any other model).

    Term t's gradient is the outer product D_k[t] H_k[t]^T for W_k and D_k[t] for b_k, with H_k the input of layer
    k at the term's sample and D_k its back-propagated coefficient (D_last = C of :func:`term_coefficients`,
    D_{k-1} = (D_k W_k) masked where the ReLU output is 0, by the same kernel as autograd's ReLU backward). Each
    entry is one product, as in autograd's batched backward pass (whose other summands are exact zeros): the blocks
    equal the autodiff ones to the last bit for one and two hidden layers, and to float64 rounding deeper (where the
    products D_k W_k are summed in another order). Written out because it skips r backward passes through the
    network and the import of torch's symbolic-shape machinery (sympy), which an autograd call with given output
    gradients makes: together most of a newly trained small target's certificate time.
    """
    chain = chain_layers(model)
    if chain is None:
        return None
    ident = {id(p): n for n, p in model.named_parameters()}
    with torch.no_grad():
        inputs, out = [x.flatten(1)], x
        for i, layer in enumerate(chain):
            out = layer(inputs[-1])
            if i < len(chain) - 1:
                inputs.append(torch.relu(out))
        coeffs, idx = term_coefficients(labels, task, len(x), out.shape[1], out.dtype)
        deltas = [coeffs]
        for i in range(len(chain) - 1, 0, -1):
            deltas.insert(0, torch.ops.aten.threshold_backward(deltas[0] @ chain[i].weight, inputs[i][idx], 0.0))
        blocks: dict[str, torch.Tensor] = {}
        for layer, d, h in zip(chain, deltas, inputs, strict=True):
            blocks[ident[id(layer.weight)]] = d[:, :, None] * h[idx][:, None, :]
            if layer.bias is not None:
                blocks[ident[id(layer.bias)]] = d
    if sorted(blocks) != sorted(names):
        return None
    return {n: blocks[n] for n in names}


@dataclass
class StationarityFit:
    relative_residual: float
    n_terms: int
    nonnegative: bool
    method: str
    seconds: float
    #: per parameter tensor: ||theta_l - (J^T lambda)_l||^2 / ||theta_l||^2 with the one joint lambda
    layer_residuals: dict[str, float] = field(default_factory=dict)
    #: per parameter tensor: its share of ||theta||^2
    layer_norm_share: dict[str, float] = field(default_factory=dict)


#: above this many Jacobian entries the fit goes matrix-free (LSMR, unconstrained) instead of dense NNLS
DENSE_LIMIT = 2.5e8


def fit_stationarity(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str,
                     nonnegative: bool | None = None) -> StationarityFit:
    """Least-squares fit of the multipliers; returns the relative residual at inputs ``x``."""
    return fit_stationarity_many(model, x, labels, task, {}, nonnegative)["theta"]


def fit_stationarity_many(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str,
                          others: dict[str, dict[str, torch.Tensor]], nonnegative: bool | None = None
                          ) -> dict[str, StationarityFit]:
    """Fit theta (key ``theta``) and each vector in ``others`` (name -> parameter dict, e.g. theta - theta0) as
    J^T lambda, one Jacobian J for all, at the model's weights and inputs ``x``.

    Dense path (small models): the Jacobian J (terms x parameters) in closed form for a ReLU chain
    (:func:`chain_jacobian`), else by one batched reverse pass (:func:`dense_jacobian`), then the normal equations
    G = J J^T, b = J v, solved as non-negative least squares through G's Cholesky factor (scipy's nnls).
    Large models: LSMR on J^T lambda = v with Jacobian-vector products, without the sign constraint.
    """
    t0 = time.perf_counter()
    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}
    vectors = {"theta": params, **others}
    terms = stationarity_terms(model, x, labels, task)
    with torch.no_grad():
        r = terms(params).numel()
    nonneg = task != "regression" if nonnegative is None else nonnegative
    numel = sum(params[n].numel() for n in names)
    fits: dict[str, StationarityFit] = {}

    # scipy's solvers are imported where used: scipy.optimize and scipy.sparse.linalg take about a second to import,
    # and every command that can train a target imports this module
    if r * numel <= DENSE_LIMIT:
        from scipy.optimize import nnls

        jac = chain_jacobian(model, x, labels, task, names) or dense_jacobian(terms, params, names)
        blocks = {n: jac[n].reshape(r, -1).double() for n in names}
        gram_by = {n: (blocks[n] @ blocks[n].T).numpy() for n in names}
        G = sum(gram_by.values())
        assert isinstance(G, np.ndarray)
        G_reg = G + np.eye(r) * 1e-12 * max(float(np.trace(G)) / r, 1e-300)  # keep the Cholesky factor defined
        L = np.linalg.cholesky(G_reg) if nonneg else None
        for key, vec in vectors.items():
            b_by = {n: (blocks[n] @ vec[n].reshape(-1).double()).numpy() for n in names}
            sq_by = {n: float((vec[n].double() ** 2).sum()) for n in names}
            b = sum(b_by.values())
            if L is not None:
                lam, _ = nnls(L.T, np.linalg.solve(L, b), maxiter=50 * r)
            else:
                lam = np.linalg.lstsq(G_reg, b, rcond=None)[0]
            res_by = {n: sq_by[n] - 2 * float(b_by[n] @ lam) + float(lam @ gram_by[n] @ lam) for n in names}
            fits[key] = _fit(res_by, sq_by, r, nonneg, "dense-nnls" if nonneg else "dense-lstsq", t0)
        return fits

    from scipy.sparse.linalg import LinearOperator, lsmr

    dtype = next(iter(params.values())).dtype
    pullback = vjp(terms, params)[1]
    sizes = [params[n].numel() for n in names]

    def matvec(lam: np.ndarray) -> np.ndarray:  # J^T lambda
        (g,) = pullback(torch.as_tensor(np.ravel(lam), dtype=dtype))
        return torch.cat([g[n].reshape(-1) for n in names]).numpy()

    def rmatvec(v: np.ndarray) -> np.ndarray:  # J v
        parts = torch.as_tensor(np.ravel(v), dtype=dtype).split(sizes)
        tangent = {n: t.view_as(params[n]) for n, t in zip(names, parts, strict=True)}
        return jvp(terms, (params,), (tangent,))[1].detach().numpy()

    op = LinearOperator((numel, r), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    for key, vec in vectors.items():
        target = torch.cat([vec[n].reshape(-1) for n in names]).double().numpy()
        lam = lsmr(op, target, maxiter=4 * r)[0]
        diff = np.split(op.matvec(lam) - target, np.cumsum(sizes)[:-1])
        res_by = {n: float(np.sum(d ** 2)) for n, d in zip(names, diff, strict=True)}
        sq_by = {n: float(np.sum(t ** 2)) for n, t in zip(names, np.split(target, np.cumsum(sizes)[:-1]), strict=True)}
        fits[key] = _fit(res_by, sq_by, r, False, "lsmr", t0)
    return fits


def _fit(res_by: dict[str, float], sq_by: dict[str, float], r: int, nonneg: bool, method: str,
         t0: float) -> StationarityFit:
    total = max(sum(sq_by.values()), 1e-300)
    return StationarityFit(
        relative_residual=max(sum(res_by.values()), 0.0) / total, n_terms=r, nonnegative=nonneg, method=method,
        seconds=time.perf_counter() - t0,
        layer_residuals={n: max(res_by[n], 0.0) / max(sq_by[n], 1e-300) for n in res_by},
        layer_norm_share={n: sq_by[n] / total for n in sq_by})


def certificate(model: TargetNet, x_train: torch.Tensor, labels: torch.Tensor, task: str, seed: int = 0,
                init: TargetNet | None = None, init_decay: float = 1.0) -> dict[str, Any]:
    """The residual at the true training data and at random inputs of the same per-pixel scale.

    Besides the residual of theta (``ratio``: at the training data over at random inputs), per parameter tensor;
    with ``init`` (the same network at its initial weights theta0), the residual of the learned part
    theta - d theta0 (``learned``), where ``init_decay`` d is what coupled weight decay left of theta0 (the product
    of 1 - lr_t wd over the steps; 1 without weight decay): what training put into the weights, which the
    stationarity condition describes once the initial weights are forgotten or negligible (docs/regime.md).
    """
    model = model.double()
    x = x_train.double()
    gen = torch.Generator().manual_seed(seed)
    x_rand = torch.randn(x.shape, generator=gen, dtype=torch.float64) * x.std()
    others: dict[str, dict[str, torch.Tensor]] = {}
    if init is not None:
        start = dict(init.double().named_parameters())
        others["learned"] = {n: p.detach() - init_decay * start[n].detach() for n, p in model.named_parameters()}
    at_truth = fit_stationarity_many(model, x, labels, task, others)
    at_random = fit_stationarity_many(model, x_rand, labels, task, others)
    truth, rand = at_truth["theta"], at_random["theta"]
    out: dict[str, Any] = {
        "residual_at_train": truth.relative_residual,
        "residual_at_random": rand.relative_residual,
        "ratio": truth.relative_residual / max(rand.relative_residual, 1e-300),
        "n_terms": truth.n_terms,
        "nonnegative_multipliers": truth.nonnegative,
        "method": truth.method,
        "seconds": max(f.seconds for f in at_truth.values()) + max(f.seconds for f in at_random.values()),
        "residual_by_layer": truth.layer_residuals,
        "norm_share_by_layer": truth.layer_norm_share,
    }
    if init is not None:
        lt, lr_ = at_truth["learned"], at_random["learned"]
        theta_sq = sum(float((p.detach() ** 2).sum()) for p in model.parameters())
        out["learned"] = {
            "residual_at_train": lt.relative_residual,
            "residual_at_random": lr_.relative_residual,
            "ratio": lt.relative_residual / max(lr_.relative_residual, 1e-300),
            "residual_by_layer": lt.layer_residuals,
            "norm_share_by_layer": lt.layer_norm_share,
            "init_decay": init_decay,
            "share_of_theta": sum(float((v ** 2).sum()) for v in others["learned"].values()) / max(theta_sq, 1e-300),
        }
    return out


#: the measure the gate reads (docs/regime.md): the residual ratio of the learned part theta - theta0
GATE_MEASURE = "learned.ratio"


def gate_value(cert: dict[str, Any] | None) -> float | None:
    """The gate measure of a certificate; None for a certificate without it (one recorded before it existed)."""
    value: Any = cert
    for key in GATE_MEASURE.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None
