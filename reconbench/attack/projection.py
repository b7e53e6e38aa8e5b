"""Iurada et al.'s projection loss on a network's head (docs/method/projection-law.md#objective).

For a head that is a linear layer reading features h(x) (the input of the model's last ``nn.Linear``; a constant 1
appended when the head has a bias), the rows of the head Jacobian are e_k (x) h(x_j), so with H the (m x q) feature
matrix of the candidates and W the (K x q) change of the head during training,

    L(X) = ||(I - P_H) W^T||^2 / ||W||^2 = 1 - <H W^T, (H H^T)^{-1} H W^T> / ||W||^2

one m x m solve with K right-hand sides (the Kronecker form of the (mK) x (mK) Gram). L lies in [0, 1] and is 0
exactly when every row of W lies in the span of the candidates' features. Everything here is batched over a leading
axis of search runs.
"""

from __future__ import annotations

import torch
from torch import nn

from reconbench.errors import IncompatibleError
from reconbench.nets import TargetNet


def head_layer(model: TargetNet) -> nn.Linear:
    """The model's head: its last ``nn.Linear`` module, which must produce the model's output."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise IncompatibleError(f"{type(model).__name__} has no linear layer; the projection loss needs a model "
                                "whose output is a linear head on features (mlp, conv, random_features)")
    return linears[-1]


def head_features(model: TargetNet, head: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(features (N, q), outputs (N, K)) at inputs ``x``: the head's input, with a 1 appended for its bias."""
    captured: list[torch.Tensor] = []
    handle = head.register_forward_hook(lambda _m, args, _out: captured.append(args[0]))
    try:
        out = model(x)
    finally:
        handle.remove()
    if len(captured) != 1:
        raise IncompatibleError(f"the head of {type(model).__name__} ran {len(captured)} times in one forward pass; "
                                "the projection loss needs a head that runs once")
    h = captured[0].flatten(1)
    if head.bias is not None:
        h = torch.cat([h, torch.ones_like(h[:, :1])], dim=1)
    return h, out.reshape(len(x), -1)


def head_vector(head: nn.Linear) -> torch.Tensor:
    """The head's weights as (K, q), the bias as the last column when there is one."""
    w = head.weight.detach()
    return torch.cat([w, head.bias.detach()[:, None]], dim=1) if head.bias is not None else w


def check_head(model: TargetNet, x: torch.Tensor) -> None:
    """Refuse a model whose output is not its last linear layer applied to what that layer reads."""
    head = head_layer(model)
    with torch.no_grad():
        h, out = head_features(model, head, x)
        again = h @ head_vector(head).T
    if again.shape != out.shape or not torch.allclose(again, out, rtol=1e-6, atol=1e-8 * (1 + float(out.abs().max()))):
        raise IncompatibleError(f"the output of {type(model).__name__} is not its last linear layer applied to that "
                                "layer's input (something follows the head); the projection loss cannot use it")


def projection_loss(features: torch.Tensor, w: torch.Tensor, jitter: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """L for each run: ``features`` (R, m, q), ``w`` (K, q). Returns (L (R,), the jitter used per run (R,)).

    The solve is a Cholesky factorisation of H H^T; a run whose Gram is not positive definite in the working
    precision (m > q, or duplicated candidates) is solved again with ``jitter`` (at least 1e-12) times the mean
    diagonal added, so that it stays finite; the jitter is returned so that callers can record it."""
    gram = features @ features.transpose(1, 2)
    v = features @ w.T                                               # (R, m, K)
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    scale = gram.diagonal(dim1=1, dim2=2).mean(dim=1).clamp_min(torch.finfo(gram.dtype).tiny)
    used = torch.zeros(len(gram), dtype=gram.dtype, device=gram.device)
    factor, info = torch.linalg.cholesky_ex(gram.detach())
    bad = info > 0
    if bool(bad.any()):
        used = torch.where(bad, max(jitter, 1e-12) * scale.detach(), used)
    if jitter > 0:
        used = torch.maximum(used, jitter * scale.detach())
    factor = torch.linalg.cholesky(gram + used[:, None, None] * eye)
    alpha = torch.cholesky_solve(v, factor)
    return 1.0 - (v * alpha).sum(dim=(1, 2)) / (w ** 2).sum(), used


def projection_residual_qr(features: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same L by an orthonormal basis of the feature span (QR): the independent check of the solve."""
    q, _ = torch.linalg.qr(features.transpose(-1, -2))               # (R, q, m): columns span the rows of H
    proj = q @ (q.transpose(-1, -2) @ w.T)
    return ((w.T - proj) ** 2).sum(dim=(-2, -1)) / (w ** 2).sum()
