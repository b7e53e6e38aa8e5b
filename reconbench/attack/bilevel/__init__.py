"""The maths of Runkel et al.'s bilevel reconstruction (the attack itself is ``reconbench_plugins.bilevel``).

Lower level (training):  theta(x) in argmin_theta E(x, y; theta),
                         E = (1/m) sum_i loss(Phi(x_i; theta), y_i) + (wd / 2) ||theta||^2.
Upper level (attack):    min_x l(theta(x)),  l(theta) = ||theta* - theta||^2.

By the implicit function theorem (grad_theta E(x, theta(x)) = 0 for all x):

    d theta / dx = -[H]^{-1} d/dx grad_theta E,   H = grad^2_theta E(x, theta(x)),
    grad_x l(theta(x)) = -grad_x < grad_theta E(x, theta), p > |_{theta = theta(x)},  p = H^{-1} grad_theta l.

:mod:`.objective` holds E and its derivatives on a flat parameter vector (torch.func); :mod:`.implicit` holds the
inner solve, the conjugate-gradient adjoint and the hypergradient.
"""

from reconbench.attack.bilevel.implicit import (
    CGResult,
    Hypergradient,
    InnerResult,
    conjugate_gradient,
    hypergradient,
    solve_lower,
    upper_loss,
)
from reconbench.attack.bilevel.objective import LowerProblem, ParamLayout, softplus_surrogate, task_targets

__all__ = [
    "CGResult", "Hypergradient", "InnerResult", "LowerProblem", "ParamLayout", "conjugate_gradient",
    "hypergradient", "softplus_surrogate", "solve_lower", "task_targets", "upper_loss",
]
