"""The plugin passes reconbench's conformance suite and does what its docstring says."""

import torch
from reconbench_lowrank_defense import LowRank, LowRankConfig

from reconbench import conformance


def test_conforms():
    conformance.check_defense(LowRank())


def test_truncation_error_is_the_dropped_singular_values():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(30, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1)).double()
    w = model[0].weight.detach().clone()
    s = torch.linalg.svdvals(w)
    LowRank().apply(model, None, LowRankConfig(rank_fraction=0.25), generator=torch.Generator())
    released = model[0].weight.detach()
    assert torch.linalg.matrix_rank(released) == 5
    assert torch.allclose(torch.linalg.norm(released - w), s[5:].pow(2).sum().sqrt())  # Eckart-Young
