"""The example metric's own tests: the reconbench conformance suite and PSNR's closed form."""

from __future__ import annotations

import math

import numpy as np
from reconbench_psnr_metric import Psnr, psnr_db

from reconbench.conformance import check_metric


def test_conforms():
    check_metric(Psnr())


def test_a_constant_offset_gives_the_closed_form():
    """x + d against x (d constant, no clipping): MSE = d^2, so PSNR = 10 log10(1 / d^2) = -20 log10 d."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.2, 0.8, size=(1, 8, 8))
    for d in (0.1, 0.01, 0.003):
        assert math.isclose(psnr_db(x + d, x, max_db=100.0), -20.0 * math.log10(d), rel_tol=1e-9)
    assert psnr_db(x, x, max_db=100.0) == 100.0          # an exact copy: the cap, not infinity
    assert psnr_db(x + 1e-9, x, max_db=100.0) == 100.0   # 180 dB, capped
