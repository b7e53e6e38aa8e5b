"""Training losses by name, their default per task, and per-sample margins."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from reconbench.errors import ReconbenchError

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _bce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(out.reshape(-1), y)


def _ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out.reshape(-1) - y) ** 2).mean()


def _l25(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out.reshape(-1) - y).abs() ** 2.5).mean()


def _huber(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.huber_loss(out.reshape(-1), y, delta=1.0)


#: name -> (function, tasks it applies to)
LOSSES: dict[str, tuple[LossFn, tuple[str, ...]]] = {
    "bce": (_bce, ("binary",)),
    "ce": (_ce, ("multiclass",)),
    "mse": (_mse, ("regression",)),
    "l25": (_l25, ("regression",)),
    "huber": (_huber, ("regression",)),
}
DEFAULT_LOSS = {"binary": "bce", "multiclass": "ce", "regression": "mse"}


def _bce_grad(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((torch.sigmoid(out.reshape(-1)) - y) / y.numel()).reshape(out.shape)


def _ce_grad(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    grad = torch.softmax(out, dim=1)
    grad[torch.arange(out.shape[0]), y] -= 1.0
    return grad.div_(out.shape[0])


def _mse_grad(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (2.0 / y.numel() * (out.reshape(-1) - y)).reshape(out.shape)


def _ce_grad_onehot(out: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """:func:`_ce_grad` with the labels' one-hot rows given: equal to it bit for bit (subtracting 0.0 leaves every
    other entry as it is), without its per-call index tensors and indexed update."""
    return torch.softmax(out, dim=1).sub_(onehot).div_(out.shape[0])


#: closed-form dL/dout for the losses whose derivative is one line (the trainer's linear-chain loop uses them to skip
#: an autograd graph per step: hand-written because torch.func would still trace the loss every step)
OUTPUT_GRADIENTS: dict[LossFn, LossFn] = {_bce: _bce_grad, _ce: _ce_grad, _mse: _mse_grad}


# -- forms that do not underflow ------------------------------------------------------------------------------------
# F.cross_entropy computes -log_softmax = log(1 + sum_{j != y} e^{z_j - z_y}) as a difference that rounds to exactly
# 0 once the margin passes about 17 (float32) or 37 (float64), and its gradient softmax - onehot rounds to 0 with it:
# training stops moving. Written as softplus(logsumexp_{j != y}(z_j - z_y)), with the per-sample terms in float64,
# the loss stays positive and its gradient nonzero until e^{-margin} leaves float64 (margin about 745).
# BCE likewise as softplus(-y z) with y in {-1, +1}.


def _softplus(t: torch.Tensor) -> torch.Tensor:
    """log(1 + e^t) without F.softplus's switch to t above 20 (whose derivative is then 1, not sigmoid(t))."""
    return torch.logaddexp(torch.zeros_like(t), t)


def _signed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y Phi with y in {-1, +1}, in float64."""
    return (2.0 * y.double() - 1.0) * out.reshape(-1).double()


def _bce_stable(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _softplus(-_signed(out, y)).mean()  # float64: the value itself may be below float32's range


def _bce_stable_grad(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = 2.0 * y.double() - 1.0
    return (-s * torch.sigmoid(-_signed(out, y)) / y.numel()).to(out.dtype).reshape(out.shape)


def _rest_lse(out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(z - z_y with the own class at -inf, float64; t = logsumexp over the other classes) per sample."""
    z = out.double()
    lab = y.long()
    diff = z - z.gather(1, lab[:, None])
    diff = diff.scatter(1, lab[:, None], float("-inf"))
    return diff, torch.logsumexp(diff, dim=1)


def _ce_stable(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _, t = _rest_lse(out, y)
    return _softplus(t).mean()


def _ce_stable_grad(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    diff, t = _rest_lse(out, y)
    weight = torch.sigmoid(t)[:, None]
    grad = weight * torch.softmax(diff, dim=1)  # the own class gets 0 from its -inf
    grad[torch.arange(out.shape[0]), y.long()] = -weight[:, 0]
    return (grad / out.shape[0]).to(out.dtype)


#: loss name -> its form that does not underflow (the losses not named here do not underflow: regression)
STABLE_FORMS: dict[str, LossFn] = {"bce": _bce_stable, "ce": _ce_stable}
OUTPUT_GRADIENTS.update({_bce_stable: _bce_stable_grad, _ce_stable: _ce_stable_grad})



def fixed_target_gradient(loss_fn: LossFn, targets: torch.Tensor, out_dim: int, dtype: torch.dtype
                          ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """out -> dL/dout for a training run whose ``targets`` stay fixed (the value of ``OUTPUT_GRADIENTS[loss_fn]``
    at them, bit for bit); None for a loss without a closed-form gradient."""
    grad = OUTPUT_GRADIENTS.get(loss_fn)
    if grad is None:
        return None
    if grad is _ce_grad:
        onehot = F.one_hot(targets.long(), out_dim).to(dtype)
        return lambda out: _ce_grad_onehot(out, onehot)
    return lambda out: grad(out, targets)


#: recipe option ``loss_form``: "legacy" (torch's forms, which underflow; every recipe written before the option
#: existed, so their targets retrain bit-identically) or "stable" (the forms above; the default of new recipes)
LOSS_FORMS = ("legacy", "stable")


def get_loss(name: str | None, task: str, form: str = "legacy") -> tuple[str, LossFn]:
    name = name or DEFAULT_LOSS[task]
    if name not in LOSSES:
        raise ReconbenchError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
    fn, tasks = LOSSES[name]
    if task not in tasks:
        allowed = [k for k, (_, t) in LOSSES.items() if task in t]
        raise ReconbenchError(f"loss {name!r} does not fit a {task} task; use one of {', '.join(allowed)}")
    if form not in LOSS_FORMS:
        raise ReconbenchError(f"unknown loss_form {form!r}; choose one of {', '.join(LOSS_FORMS)}")
    return name, STABLE_FORMS.get(name, fn) if form == "stable" else fn


def stable_loss(name: str | None, task: str) -> LossFn:
    """The training loss ``name`` (None: the task's default) in the form that does not underflow."""
    return get_loss(name, task, "stable")[1]


def margins(out: torch.Tensor, labels: torch.Tensor, task: str) -> torch.Tensor:
    """Per-sample distance to the decision boundary.

    binary: y * Phi with y in {-1, +1}; multiclass: label logit minus the largest other logit;
    regression: |Phi - y| with y in {-1, +1} (there, smaller is closer to the target).
    """
    if task == "binary":
        return (2.0 * labels.to(out.dtype) - 1.0) * out.reshape(-1)
    if task == "multiclass":
        lab = labels.long()
        own = out.gather(1, lab[:, None]).squeeze(1)
        other = out.scatter(1, lab[:, None], float("-inf")).amax(dim=1)
        return own - other
    return (out.reshape(-1) - (2.0 * labels.to(out.dtype) - 1.0)).abs()


def error_rate(out: torch.Tensor, labels: torch.Tensor, task: str) -> float:
    """binary: sign mismatch (a logit of exactly 0 counts as wrong); multiclass: argmax; regression: sign."""
    if task == "multiclass":
        return float((out.argmax(dim=1) != labels.long()).double().mean())
    y = 2.0 * labels.to(out.dtype) - 1.0
    return float(((out.reshape(-1) * y) <= 0).double().mean())
