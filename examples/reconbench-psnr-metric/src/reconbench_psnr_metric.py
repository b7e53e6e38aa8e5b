"""An external reconbench metric: PSNR (dB) of each training image against the reconstruction matched to it.

One file and one entry point (``pyproject.toml``): the metric declares the numbers it reports (name, the values they
can take, which direction means more leakage, and a default leaderboard column), so boards, exports and the console
show them with no change to reconbench. Once installed it is computed in every evaluation whose protocol does not
list its metrics (the default); a protocol that lists them names ``"psnr"`` to include it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from skimage.metrics import peak_signal_noise_ratio

from reconbench import hookimpl
from reconbench.config import option
from reconbench.errors import IncompatibleError
from reconbench.evaluation.context import Evaluation
from reconbench.interfaces import Metric, MetricResult, Reported


@dataclass
class PsnrConfig:
    threshold_db: float = option(20.0, "an image counts as recovered at or above this PSNR (dB)")
    max_db: float = option(100.0, "PSNR of an exact copy is infinite: values are capped here so that means stay finite")


def psnr_db(reconstruction: np.ndarray, original: np.ndarray, max_db: float) -> float:
    """PSNR of one image pair with data range 1 (images in [0, 1]), capped at ``max_db``."""
    if np.array_equal(reconstruction, original):
        return max_db
    return min(float(peak_signal_noise_ratio(original, reconstruction, data_range=1.0)), max_db)


@dataclass(frozen=True)
class Psnr(Metric):
    name: str = "psnr"
    description: str = ("peak signal-to-noise ratio (dB, data range 1) of each training image against its matched "
                        "reconstruction (scikit-image); unmatched images have none")
    higher_is_better: bool = True
    headline: str = "mean_psnr_matched"
    reports: tuple[Reported, ...] = (
        Reported("mean_psnr_matched", "mean PSNR of matched images (dB)", "nonnegative", fmt=".2f", column=95),
        Reported("recovered_psnr", "recovered (PSNR >= threshold)", "count", fmt=".1f"),
    )
    config_cls: type = PsnrConfig

    def check_config(self, cfg: PsnrConfig) -> None:
        if not 0 < cfg.threshold_db <= cfg.max_db:
            raise IncompatibleError(f"psnr.threshold_db must be in (0, max_db = {cfg.max_db}], got {cfg.threshold_db}")

    def compute(self, ev: Evaluation, cfg: PsnrConfig) -> MetricResult:
        matched = ev.matching.matched
        values = np.full(ev.n, np.nan)
        recon, orig = ev.recon_display.numpy(), ev.originals.numpy()
        for i in np.flatnonzero(matched):
            values[i] = psnr_db(recon[i], orig[i], cfg.max_db)
        finite = values[~np.isnan(values)]
        summary = {"mean_psnr_matched": float(finite.mean()) if finite.size else None,
                   "recovered_psnr": int((finite >= cfg.threshold_db).sum())}
        return {"summary": summary, "per_image": {"psnr": [None if np.isnan(v) else float(v) for v in values]}}


@hookimpl
def register_metrics(register):  # type: ignore[no-untyped-def]
    register(Psnr())
