"""The closed-form chain step as it was before its ReLU mask, cross-entropy gradient and bias decay were rewritten
(mask built by ``h <= 0`` and ``masked_fill_``, the gradient's label entries updated by index, the bias multiplied by
the decay even when it is 1): the reference the current step must match bit for bit
(tests/unit/targets/test_chain_gd_bitwise.py)."""
from __future__ import annotations

import torch

from reconbench.targets.chain_gd import ChainGD
from reconbench.targets.losses import OUTPUT_GRADIENTS


class StepBeforeThreshold(ChainGD):
    """:class:`ChainGD` with the earlier forward pass, output gradient and step (same buffers, same products)."""

    @torch.no_grad()
    def forward(self) -> torch.Tensor:
        first, last = self.layers[0], len(self.layers) - 1
        if not self.factorise_first:
            torch.mm(self.x, first.weight.t(), out=self.pre)
        h = self.acts[0].copy_(self.pre)
        if first.bias is not None:
            h.add_(first.bias)
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
        grad = OUTPUT_GRADIENTS.get(self.loss_fn)
        if grad is None:
            return super().loss_and_grad()
        z = self.forward()
        return self.loss_fn(z, self.y), grad(z, self.y)

    @torch.no_grad()
    def step(self, dz: torch.Tensor, lr: float) -> None:
        decay = 1.0 - lr * self.wd
        g = dz
        for i in range(len(self.layers) - 1, 0, -1):
            layer, h = self.layers[i], self.acts[i - 1]
            g_in = torch.mm(g, layer.weight, out=self.grad_in[i - 1]).masked_fill_(h <= 0, 0.0)
            layer.weight.addmm_(g.t(), h, beta=decay, alpha=-lr)
            if layer.bias is not None:
                layer.bias.mul_(decay).add_(g.sum(dim=0), alpha=-lr)
            g = g_in
        first = self.layers[0]
        if not self.factorise_first:
            first.weight.addmm_(g.t(), self.x, beta=decay, alpha=-lr)
            if first.bias is not None:
                first.bias.mul_(decay).add_(g.sum(dim=0), alpha=-lr)
            return
        if decay != 1.0:
            self.scale *= decay
            self.coef.mul_(decay)
            self.pre.mul_(decay)
        self.coef.sub_(g.t(), alpha=lr)
        self.pre.addmm_(self.gram, g, alpha=-lr)
        if first.bias is not None:
            first.bias.mul_(decay).add_(g.sum(dim=0), alpha=-lr)
