"""Full-batch gradient descent on a linear chain (MLP / affine) with its backward pass written out.

For a model whose forward is z = L_k(relu(...relu(L_1(x)))) (``TargetNet.linear_chain``) one step of the papers' GD is:
the forward pass into preallocated activations, the loss gradient dL/dz in closed form
(``losses.fixed_target_gradient``; by autograd on the (n, K) output only for other losses), then
for each layer from the last: g_in = (g W_l) * [h_{l-1} > 0] at the current weights (zeroed in place by the kernel
of autograd's ReLU backward), and the SGD update
W_l <- (1 - lr wd) W_l - lr g^T h_{l-1} as one in-place rank-n product (``addmm_``), b_l likewise with sum_i g_i.

The first layer sees the same n inputs X at every step, so its update -lr g^T X stays in their span: the layer is
kept as W_1 = s W_1(0) + C X, with the n x n Gram matrix K = X X^T, and its pre-activations P = X W_1^T advance by
P <- (1 - lr wd) P - lr K g, an n x n x width product instead of two passes over the width x D weights. ``sync``
writes W_1 back into the model (exactly s W_1(0) + C X) and restarts the factorisation from it; the trainer calls it
before anything reads the model.

In float32 (``factorise_first=False``) the first layer is updated like the others, W_1 <- decay W_1 - lr g^T X, and
P = X W_1^T recomputed from it every step: the factorised P accumulates each step's rounding of its own update, which
in float32 drifts from X W_1^T far enough to change an inverse-loss schedule's course (a CIFAR-10 target diverged at
step 109 where the autograd loop did not); recomputed, P has the autograd loop's rounding.

In exact arithmetic every step equals the autograd loop's; in floating point the weights agree with it to rounding
(tests/unit/targets/test_training.py compares them with a plain autograd loop, in float64 and in float32). Hand-written because
no library offers a fused full-batch step for this model class.
"""

from __future__ import annotations

import torch
from torch import nn

from reconbench.nets import TargetNet
from reconbench.targets.losses import LossFn, fixed_target_gradient


def chain_layers(model: TargetNet) -> list[nn.Linear] | None:
    """The model's linear chain when its forward is the chain with ReLU between layers, else None."""
    chain = model.linear_chain()
    if chain is None or model.activation is not torch.relu:
        return None
    if not all(type(layer) is nn.Linear for layer in chain):
        return None
    if {id(p) for p in model.parameters()} != {id(p) for layer in chain for p in layer.parameters()}:
        return None  # a parameter outside the chain would not be trained here
    return chain


class ChainGD:
    """One object per training run: holds the activations and the first layer's factorisation; steps in place."""

    def __init__(self, layers: list[nn.Linear], x: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn,
                 weight_decay: float, factorise_first: bool = True) -> None:
        self.layers = layers
        self.factorise_first = factorise_first
        self.x = x.flatten(1)
        self.y = targets
        self.loss_fn = loss_fn
        self.wd = weight_decay
        self.output_grad = fixed_target_gradient(loss_fn, targets, layers[-1].out_features, self.x.dtype)
        n = self.x.shape[0]
        self.acts = [self.x.new_empty(n, layer.out_features) for layer in layers]
        self.grad_in = [self.x.new_empty(n, layer.in_features) for layer in layers[1:]]
        self.gram = self.x @ self.x.t() if factorise_first else self.x.new_empty(0)
        first = layers[0]
        self.coef = self.x.new_zeros(first.out_features, n)  # C in W_1 = s W_1(0) + C X
        self.scale = 1.0                                         # s
        self.pre = self.x.new_empty(n, first.out_features)   # P = X W_1^T
        self.sync()

    @torch.no_grad()
    def sync(self) -> None:
        """Write W_1 = s W_1(0) + C X into the model and restart the factorisation from it."""
        if not self.factorise_first:   # W_1 is the model's own, updated in place
            return
        w = self.layers[0].weight
        if self.scale != 1.0:
            w.mul_(self.scale)
        w.addmm_(self.coef, self.x)
        self.coef.zero_()
        self.scale = 1.0
        torch.mm(self.x, w.t(), out=self.pre)

    @torch.no_grad()
    def forward(self) -> torch.Tensor:
        """z = chain(x), written into the preallocated activations (the last one is z)."""
        first, last = self.layers[0], len(self.layers) - 1
        if not self.factorise_first:
            torch.mm(self.x, first.weight.t(), out=self.pre)
        h = self.acts[0]
        if first.bias is not None:
            torch.add(self.pre, first.bias, out=h)
        else:
            h.copy_(self.pre)
        for i, layer in enumerate(self.layers):
            out = self.acts[i]
            if i > 0:
                if layer.bias is None:
                    torch.mm(h, layer.weight.t(), out=out)
                else:
                    torch.addmm(layer.bias, h, layer.weight.t(), out=out)
            if i < last:
                out.relu_()
            h = out
        return self.acts[-1]

    def loss_and_grad(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training loss (a 0-d tensor) and its gradient with respect to the outputs z."""
        if self.output_grad is not None:
            z = self.forward()
            return self.loss_fn(z, self.y), self.output_grad(z)
        z = self.forward().detach().requires_grad_(True)
        with torch.enable_grad():
            loss = self.loss_fn(z, self.y)
            (dz,) = torch.autograd.grad(loss, z)
        return loss.detach(), dz

    @torch.no_grad()
    def step(self, dz: torch.Tensor, lr: float) -> None:
        """Backward from dL/dz through the chain at the current weights, updating each layer once it is passed."""
        decay = 1.0 - lr * self.wd
        g = dz
        for i in range(len(self.layers) - 1, 0, -1):
            layer, h = self.layers[i], self.acts[i - 1]
            g_in = torch.mm(g, layer.weight, out=self.grad_in[i - 1])
            # zero where the ReLU output is <= 0: autograd's ReLU backward kernel, in place (the same values as
            # masked_fill_(h <= 0, 0.0), several times faster on these small tensors than building the mask)
            torch.ops.aten.threshold_backward.grad_input(g_in, h, 0.0, grad_input=g_in)
            layer.weight.addmm_(g.t(), h, beta=decay, alpha=-lr)
            if layer.bias is not None:
                _decay_and_add(layer.bias, decay, g.sum(dim=0), -lr)
            g = g_in
        first = self.layers[0]  # W_1 <- decay W_1 - lr g^T X, kept factorised (float64) or applied (float32)
        if not self.factorise_first:
            first.weight.addmm_(g.t(), self.x, beta=decay, alpha=-lr)
            if first.bias is not None:
                _decay_and_add(first.bias, decay, g.sum(dim=0), -lr)
            return
        if decay != 1.0:
            self.scale *= decay
            self.coef.mul_(decay)
            self.pre.mul_(decay)
        self.coef.sub_(g.t(), alpha=lr)
        self.pre.addmm_(self.gram, g, alpha=-lr)
        if first.bias is not None:
            _decay_and_add(first.bias, decay, g.sum(dim=0), -lr)


def _decay_and_add(bias: torch.Tensor, decay: float, step: torch.Tensor, alpha: float) -> None:
    """bias <- decay bias + alpha step in place; without weight decay (decay 1) the multiplication, an exact no-op,
    is skipped."""
    if decay != 1.0:
        bias.mul_(decay)
    bias.add_(step, alpha=alpha)
