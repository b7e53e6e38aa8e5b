"""The regime test of each threat model, measured on the released weights the attack sees (docs/regime.md).

Three residuals, each ``||v - J^T lambda|| / ||v||`` (a norm ratio, not its square) with J the Jacobian of the
per-sample terms s (binary: y_i Phi(x_i); multiclass: Phi_y(x_i) - Phi_j(x_i) for every wrong class j, the per-class
form of Buzaglo et al.; regression: Phi(x_i)) at the training images:

* ``theta`` (an attacker who sees theta only: Haim et al., Buzaglo et al.): v = theta, the best lambda >= 0
  (non-negative least squares; unconstrained for regression). 0 at a KKT point of the max-margin problem.
  The margin set is the samples with a positive multiplier.
* ``regularised`` (a target trained with weight decay wd): no fit; the gradient of L(theta) + wd/2 ||theta||^2
  relative to wd ||theta||, i.e. ``||theta + grad L(theta) / wd|| / ||theta||``. 0 at a stationary point of the
  regularised loss; the multipliers it implies are -l'_i / (n wd).
* ``learned`` (an attacker given theta0): v = theta - d theta0, d what coupled weight decay left of theta0,
  the best lambda >= 0 as for ``theta``.

The multipliers come from NNLS on the normal equations (as in the certificate); the residual is then computed from
the vector theta - J^T lambda itself (one vector-Jacobian product), so a planted KKT point reads 0 to rounding.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import torch
from torch.func import functional_call, jvp, vjp

from reconbench.nets import TargetNet
from reconbench.records.model_card import Certificate
from reconbench.targets.certificate import stationarity_terms
from reconbench.targets.losses import stable_loss

#: which stationarity an attack's premise needs of the released weights (an attack declares it: ``Attack.regime_test``)
RegimeTest = Literal["theta", "regularised", "learned"]
REGIME_TESTS: tuple[RegimeTest, ...] = ("theta", "regularised", "learned")

#: a target is inside an attack's regime when its residual is at most this: at most a quarter of ||v||^2 is left
#: unexplained by the stationarity condition. A convention between a planted KKT point (0) and random inputs (about 1),
#: not fitted to any board.
MAX_RESIDUAL = 0.5

#: above this many terms a model without a closed form (not a ReLU chain) is not measured (2 passes per term)
MAX_AUTODIFF_TERMS = 1000

#: a multiplier counts towards the margin set when it is above this share of the largest one
SUPPORT_SHARE = 1e-6


def _fit(gram: np.ndarray, b: np.ndarray, nonneg: bool) -> np.ndarray:
    """lambda minimising ||v - J^T lambda|| (lambda >= 0 when ``nonneg``) from G = J J^T and b = J v."""
    r = gram.shape[0]
    reg = np.eye(r) * 1e-13 * max(float(np.trace(gram)) / max(r, 1), 1e-300)  # keeps the factor defined
    if not nonneg:
        return np.asarray(np.linalg.lstsq(gram + reg, b, rcond=None)[0])
    chol = np.linalg.cholesky(gram + reg)
    from scipy.optimize import nnls  # imported where used: scipy.optimize takes about a second to import

    lam, _ = nnls(chol.T, np.linalg.solve(chol, b), maxiter=50 * r)
    return np.asarray(lam)


def _flat(params: Mapping[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([params[n].reshape(-1) for n in names])


def regime_residuals(model: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str, *,
                     weight_decay: float = 0.0, loss_name: str | None = None, init: TargetNet | None = None,
                     init_decay: float = 1.0) -> dict[str, Any]:
    """The residual of each threat model at inputs ``x`` (float64 copies; ``model`` is not changed).

    ``regularised`` is measured when ``weight_decay`` > 0, ``learned`` when ``init`` (the network at theta0) is given.
    The Jacobian J is never stored: for a ReLU chain of linear layers its products come in closed form
    (:func:`_chain_operators`), for other models from vector-Jacobian and Jacobian-vector products.
    """
    net = copy.deepcopy(model).double().eval()
    x = x.double()
    names = [n for n, _ in net.named_parameters()]
    params = {n: p.detach() for n, p in net.named_parameters()}
    ops = _chain_operators(net, x, labels, task, names)
    if ops is None:
        with torch.no_grad():
            r = stationarity_terms(net, x, labels, task)(params).numel()
        if r > MAX_AUTODIFF_TERMS:
            return {"max_residual": MAX_RESIDUAL, "n_terms": r,
                    "skipped": f"{r} terms on a model that is not a ReLU chain: {2 * r} autodiff passes; the "
                               "certificate's theta fit stands in (its square root)"}
        ops = _autodiff_operators(net, x, labels, task, names, params)
    r, gram, j, jt = ops
    nonneg = task != "regression"
    theta = _flat(params, names)
    result: dict[str, Any] = {"max_residual": MAX_RESIDUAL, "n_terms": r, "nonnegative_multipliers": nonneg}

    def fitted(v: torch.Tensor) -> tuple[float, np.ndarray]:
        lam = _fit(gram, j(v).numpy(), nonneg)
        left = v - jt(torch.as_tensor(lam, dtype=torch.float64))
        return float(left.norm()) / max(float(v.norm()), 1e-300), lam

    res, lam = fitted(theta)
    with torch.no_grad():
        margins = _margins(net(x), labels, task)
    top = float(lam.max()) if lam.size else 0.0
    support = np.flatnonzero(lam > SUPPORT_SHARE * top) if top > 0 else np.zeros(0, dtype=int)
    per_term = max(r // max(len(x), 1), 1)  # multiclass: K - 1 terms per sample, in sample order
    margin_set = sorted({int(i) // per_term for i in support})
    result["theta"] = {
        "residual": res,
        # per sample, the sum of its terms' multipliers (n numbers, whatever the number of classes)
        "multipliers": [float(v) for v in lam.reshape(-1, per_term).sum(axis=1)] if lam.size else [],
        # the samples with a positive multiplier (multiclass: a positive multiplier on any of its terms), and their
        # margins at the released weights in float64 (binary: y Phi; multiclass: own logit minus the largest other)
        "margin_set": margin_set,
        "margin_set_margins": [float(margins[i]) for i in margin_set],
    }
    if weight_decay > 0:
        result["regularised"] = {"residual": _regularised(net, x, labels, task, weight_decay, loss_name, names),
                                 "weight_decay": weight_decay}
    if init is not None:
        start = {n: p.detach().double() for n, p in init.named_parameters()}
        res_l, _ = fitted(theta - init_decay * _flat(start, names))
        result["learned"] = {"residual": res_l, "init_decay": init_decay}
    return result


Operators = tuple[int, np.ndarray, Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


def _autodiff_operators(net: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str, names: list[str],
                        params: dict[str, torch.Tensor]) -> Operators:
    """(r, G = J J^T, v -> J v, lambda -> J^T lambda) by autodiff: G column by column, 2 r passes for r terms."""
    sizes = [params[n].numel() for n in names]
    terms = stationarity_terms(net, x, labels, task)
    out_terms, pullback = vjp(terms, params)[:2]
    r = out_terms.numel()

    def jt(lam: torch.Tensor) -> torch.Tensor:  # J^T lambda, flat
        return _flat(pullback(lam.to(out_terms.dtype))[0], names)

    def j(u: torch.Tensor) -> torch.Tensor:  # J u
        tangent = {n: t.view_as(params[n]) for n, t in zip(names, u.split(sizes), strict=True)}
        return jvp(terms, (params,), (tangent,))[1].detach()

    gram = torch.stack([j(jt(e)) for e in torch.eye(r, dtype=torch.float64)]).numpy() if r else np.zeros((0, 0))
    return r, 0.5 * (gram + gram.T), j, jt


def _term_coefficients(labels: torch.Tensor, task: str, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, idx): term t is C[t] . Phi(x[idx[t]]), in the order of :func:`stationarity_terms`."""
    lab = labels.long()
    if task == "binary":
        return (2.0 * labels.double() - 1.0)[:, None], torch.arange(n)
    if task == "regression":
        return torch.ones(n, 1, dtype=torch.float64), torch.arange(n)
    rows, idx = [], []
    eye = torch.eye(k, dtype=torch.float64)
    for i in range(n):
        for c in range(k):
            if c != int(lab[i]):
                rows.append(eye[int(lab[i])] - eye[c])
                idx.append(i)
    return torch.stack(rows), torch.as_tensor(idx)


def _chain_operators(net: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str,
                     names: list[str]) -> Operators | None:
    """The same operators in closed form for L_k(relu(...relu(L_1(x.flatten(1))))) holding every parameter.

    With H_k the input of layer k at the term's sample and D_k the back-propagated coefficient (D_last = C,
    D_{k-1} = (D_k W_k) * 1[Z_{k-1} > 0]), a term's gradient is D_k^T H_k for W_k and D_k for b_k, so
    G = sum_k (D_k D_k^T) * (H_k H_k^T + 1[bias]), (J v)_t = sum_k D_k[t] . (V_k H_k[t] + c_k) and J^T lambda is
    D_k^T diag(lambda) H_k per layer: a few small matrix products instead of 2 r passes through the network
    (written out here because autodiff cannot exploit the rank-one structure of each term's gradient).
    """
    chain = net.linear_chain()
    if chain is None or net.activation is not torch.relu:
        return None
    ident = {id(p): n for n, p in net.named_parameters()}
    owned = [(ident.get(id(layer.weight)), ident.get(id(layer.bias)) if layer.bias is not None else None)
             for layer in chain]
    covered = [n for pair in owned for n in pair if n is not None]
    if sorted(covered) != sorted(names) or any(w is None for w, _ in owned):
        return None
    with torch.no_grad():
        inputs, pre = [x.flatten(1)], []
        for k, layer in enumerate(chain):
            z = torch.nn.functional.linear(inputs[-1], layer.weight, layer.bias)
            pre.append(z)
            if k < len(chain) - 1:
                inputs.append(torch.relu(z))
        coeffs, idx = _term_coefficients(labels, task, len(x), pre[-1].shape[1])
        deltas = [coeffs]
        for k in range(len(chain) - 1, 0, -1):
            deltas.insert(0, (deltas[0] @ chain[k].weight) * (pre[k - 1][idx] > 0).double())
        acts = [h[idx] for h in inputs]
        gram = sum(((d @ d.T) * (a @ a.T + (1.0 if layer.bias is not None else 0.0)))
                   for d, a, layer in zip(deltas, acts, chain, strict=True))
    assert isinstance(gram, torch.Tensor)
    shapes = {n: p.shape for n, p in net.named_parameters()}
    sizes = [shapes[n].numel() for n in names]

    def split(v: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.view(shapes[n]) for n, t in zip(names, v.split(sizes), strict=True)}

    def j(v: torch.Tensor) -> torch.Tensor:
        parts = split(v)
        total = torch.zeros(len(idx), dtype=torch.float64)
        for (w, b), d, a in zip(owned, deltas, acts, strict=True):
            z = a @ parts[str(w)].T + (parts[b] if b is not None else 0.0)
            total += (d * z).sum(dim=1)
        return total

    def jt(lam: torch.Tensor) -> torch.Tensor:
        out: dict[str, torch.Tensor] = {}
        for (w, b), d, a in zip(owned, deltas, acts, strict=True):
            out[str(w)] = d.T @ (lam[:, None] * a)
            if b is not None:
                out[b] = d.T @ lam
        return _flat(out, names)

    g = gram.numpy()
    return len(idx), 0.5 * (g + g.T), j, jt


def _margins(out: torch.Tensor, labels: torch.Tensor, task: str) -> torch.Tensor:
    from reconbench.targets.losses import margins

    return margins(out, labels, task)


def _regularised(net: TargetNet, x: torch.Tensor, labels: torch.Tensor, task: str, wd: float,
                 loss_name: str | None, names: list[str]) -> float:
    """||grad L(theta) + wd theta|| / ||wd theta|| with L the training loss in a form that does not underflow."""
    params = {n: p.detach().requires_grad_(True) for n, p in net.named_parameters()}
    y = _loss_targets(labels, task)
    loss = stable_loss(loss_name, task)(functional_call(net, params, (x,)), y)
    grads = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    g = torch.cat([(gi if gi is not None else torch.zeros_like(params[n])).reshape(-1)
                   for gi, n in zip(grads, names, strict=True)])
    theta = torch.cat([params[n].detach().reshape(-1) for n in names])
    return float((g.detach() + wd * theta).norm() / max(wd * float(theta.norm()), 1e-300))


def _loss_targets(labels: torch.Tensor, task: str) -> torch.Tensor:
    """What the losses take: class indices (multiclass), 0/1 (binary), +-1 (regression: the problems' convention)."""
    if task == "multiclass":
        return labels.long()
    if task == "binary":
        return labels.double()
    return 2.0 * labels.double() - 1.0


def residual_for(cert: Certificate | Mapping[str, Any] | None, threat: RegimeTest) -> tuple[float | None, str]:
    """The residual a certificate records for ``threat`` and where it comes from (a certificate's JSON is read as
    its record first).

    Cards written before the regime block existed carry the certificate's squared residual of theta and of the
    learned part (NNLS fits at the training images); their square root is the same residual. For ``regularised``
    such a card gives the NNLS residual of theta, a lower bound (the fitted multipliers are the best, the loss
    gradient's are one choice), so a target it puts outside the regime is outside.
    """
    if isinstance(cert, Mapping):
        cert = Certificate.from_dict(cert)
    if not isinstance(cert, Certificate):
        return None, "no certificate"
    block = cert.regime
    if block is not None:
        theta_for_regularised = threat == "regularised" and block.regularised is None
        part = block.theta if theta_for_regularised else block.fit(threat)
        value = None if part is None else part.residual
        if value is not None:
            how = "theta fit (trained without weight decay)" if theta_for_regularised else threat
            return float(value), how
    source = cert.learned if threat == "learned" else cert
    sq = None if source is None else source.residual_at_train
    if sq is not None and math.isfinite(sq):
        name = "learned" if threat == "learned" else "theta"
        bound = " (a lower bound of the regularised residual)" if threat == "regularised" else ""
        return math.sqrt(max(float(sq), 0.0)), f"{name} fit from the certificate{bound}"
    return None, "not in the certificate"


def regime_test_of(attack: str) -> RegimeTest | None:
    """The regime test an attack declares (``Attack.regime_test``); None for one that declares none or is not
    registered here (its cells are not gated)."""
    from reconbench import plugins

    if attack not in plugins.names("attacks"):
        return None
    test = getattr(plugins.attack(attack), "regime_test", None)
    return test if test in REGIME_TESTS else None


def in_regime(value: float | None) -> bool | None:
    return None if value is None else value <= MAX_RESIDUAL
