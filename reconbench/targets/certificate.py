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
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import nnls
from scipy.sparse.linalg import LinearOperator, lsmr
from torch.func import functional_call, jacrev, jvp, vjp

from reconbench.targets.nets import TargetNet


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


@dataclass
class StationarityFit:
    relative_residual: float
    n_terms: int
    nonnegative: bool
    method: str
    seconds: float


#: above this many Jacobian entries the fit goes matrix-free (LSMR, unconstrained) instead of dense NNLS
DENSE_LIMIT = 2.5e8


def fit_stationarity(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str,
                     nonnegative: bool | None = None) -> StationarityFit:
    """Least-squares fit of the multipliers; returns the relative residual at inputs ``x``.

    Dense path (small models): the Jacobian J (terms x parameters) via torch.func.jacrev, then the normal equations
    G = J J^T, b = J theta, solved as non-negative least squares through G's Cholesky factor (scipy's nnls).
    Large models: LSMR on J^T lambda = theta with Jacobian-vector products, without the sign constraint.
    """
    t0 = time.perf_counter()
    names = [n for n, _ in model.named_parameters()]
    params = {n: p.detach() for n, p in model.named_parameters()}
    theta = torch.cat([params[n].reshape(-1) for n in names])
    theta_sq = float(theta @ theta)
    terms = stationarity_terms(model, x, labels, task)
    with torch.no_grad():
        r = terms(params).numel()
    nonneg = task != "regression" if nonnegative is None else nonnegative

    if r * theta.numel() <= DENSE_LIMIT:
        jac = jacrev(terms)(params)
        J = torch.cat([jac[n].reshape(r, -1) for n in names], dim=1).double()
        G = (J @ J.T).numpy()
        b = (J @ theta.double()).numpy()
        G = G + np.eye(r) * 1e-12 * max(float(np.trace(G)) / r, 1e-300)  # keep the Cholesky factor defined
        if nonneg:
            L = np.linalg.cholesky(G)
            lam, _ = nnls(L.T, np.linalg.solve(L, b), maxiter=50 * r)
        else:
            lam = np.linalg.lstsq(G, b, rcond=None)[0]
        resid = theta_sq - 2 * float(b @ lam) + float(lam @ G @ lam)
        method = "dense-nnls" if nonneg else "dense-lstsq"
    else:
        dtype = theta.dtype
        pullback = vjp(terms, params)[1]

        def matvec(lam: np.ndarray) -> np.ndarray:  # J^T lambda
            (g,) = pullback(torch.as_tensor(np.ravel(lam), dtype=dtype))
            return torch.cat([g[n].reshape(-1) for n in names]).numpy()

        def rmatvec(v: np.ndarray) -> np.ndarray:  # J v
            vt, i, tangent = torch.as_tensor(np.ravel(v), dtype=dtype), 0, {}
            for n in names:
                k = params[n].numel()
                tangent[n] = vt[i:i + k].view_as(params[n])
                i += k
            return jvp(terms, (params,), (tangent,))[1].detach().numpy()

        op = LinearOperator((theta.numel(), r), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
        lam = lsmr(op, theta.numpy().astype(np.float64), maxiter=4 * r)[0]
        resid = float(np.sum((op.matvec(lam) - theta.numpy()) ** 2))
        nonneg, method = False, "lsmr"
    return StationarityFit(max(resid, 0.0) / theta_sq, r, nonneg, method, time.perf_counter() - t0)


def certificate(model: TargetNet, x_train: torch.Tensor, labels: torch.Tensor, task: str,
                seed: int = 0) -> dict[str, float | int | bool | str]:
    """The residual at the true training data and at random inputs of the same per-pixel scale."""
    model = model.double()
    x = x_train.double()
    gen = torch.Generator().manual_seed(seed)
    x_rand = torch.randn(x.shape, generator=gen, dtype=torch.float64) * x.std()
    at_truth = fit_stationarity(model, x, labels, task)
    at_random = fit_stationarity(model, x_rand, labels, task)
    return {
        "residual_at_train": at_truth.relative_residual,
        "residual_at_random": at_random.relative_residual,
        "ratio": at_truth.relative_residual / max(at_random.relative_residual, 1e-300),
        "n_terms": at_truth.n_terms,
        "nonnegative_multipliers": at_truth.nonnegative,
        "method": at_truth.method,
        "seconds": at_truth.seconds + at_random.seconds,
    }
