"""A small stand-alone implementation of the papers' evaluation protocol, for the cpu-mini KKT measurements.

This is NOT the harness's evaluation module (reconbench/evaluation, written separately); it exists so that the
numbers reported for the KKT attacks can be regenerated with one script. It follows
docs/method/evaluation-protocol.md#headline-protocol:

1. pool the candidates (of all runs, or of one selected run);
2. bicubic downsampling by 2 (torch, align_corners=False, no antialias), NCC distance per pixel
   (per-image, per-channel standardisation with the unbiased std, plus an epsilon);
3. best-buddy mask: each candidate may only be assigned to its own nearest training image;
4. for each training image, average (in the centred space) its assigned candidates whose distance is < B times
   that of its best one (B = 1.1 for MLPs);
5. add the mean image back and min-max scale the reconstruction to [0, 1] (the original is not rescaled);
6. SSIM with kornia's formula, window 3 (Gaussian sigma 1.5), data range 1, averaged over C x H x W;
7. a training image is "reconstructed" iff SSIM > 0.4 (counted over training images).

A training image that no candidate chose is reported as unmatched and not counted (the reference silently
pairs it with an arbitrary candidate). Also reported for the same matched pairs: Pearson (NCC) correlation of
the reconstruction with the original, and scikit-image's default SSIM (7x7 uniform window, borders cropped).

    python benchmarks/kkt_protocol.py RESULT_DIR [--runs all|blind|oracle|0,3,...] [--data-root ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


def standardise(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Per image and channel: subtract the mean, divide by the unbiased std (+ eps); flattened."""
    flat = x.flatten(2)
    return ((flat - flat.mean(-1, keepdim=True)) / (flat.std(-1, keepdim=True) + eps)).flatten(1)


def ncc_distance(train: torch.Tensor, cands: torch.Tensor, downsample: int = 2) -> torch.Tensor:
    """(n, M) squared L2 between standardised images divided by the number of pixels (~ 2 (1 - corr))."""
    if downsample > 1:
        def down(t: torch.Tensor) -> torch.Tensor:
            return F.interpolate(t, scale_factor=1 / downsample, mode="bicubic", align_corners=False,
                                 antialias=False)
        train, cands = down(train), down(cands)
    a, b = standardise(train), standardise(cands)
    return torch.cdist(a, b) ** 2 / a.shape[1]


def correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean over channels of the Pearson correlation of paired images (n, C, H, W)."""
    fa, fb = a.flatten(2), b.flatten(2)
    fa = fa - fa.mean(-1, keepdim=True)
    fb = fb - fb.mean(-1, keepdim=True)
    r = (fa * fb).sum(-1) / (fa.norm(dim=-1) * fb.norm(dim=-1) + 1e-12)
    return r.mean(-1)


def minmax(x: torch.Tensor) -> torch.Tensor:
    lo = x.flatten(1).min(1).values[:, None, None, None]
    hi = x.flatten(1).max(1).values[:, None, None, None]
    return (x - lo) / (hi - lo).clamp_min(1e-12)


def kornia_ssim(a: torch.Tensor, b: torch.Tensor, window: int = 3) -> torch.Tensor:
    import kornia

    return kornia.metrics.ssim(a.double(), b.double(), window_size=window, max_val=1.0).flatten(1).mean(1)


def skimage_ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from skimage.metrics import structural_similarity

    out = []
    for x, y in zip(a.numpy(), b.numpy(), strict=True):
        out.append(structural_similarity(x, y, data_range=1.0, channel_axis=0))
    return torch.tensor(out)


def match(train_c: torch.Tensor, cands_c: torch.Tensor, mean: torch.Tensor, *, threshold: float = 1.1,
          best_buddy: bool = True, downsample: int = 2) -> dict[str, Any]:
    """Protocol steps 2-6. Inputs in the centred space; returns per-training-image scores."""
    d = ncc_distance(train_c, cands_c, downsample)
    if best_buddy:
        owner = d.argmin(dim=0)  # the nearest training image of each candidate
        d = torch.where(torch.arange(len(train_c))[:, None] == owner[None, :], d, torch.inf)
    n = len(train_c)
    recon = torch.zeros_like(train_c)
    matched = torch.zeros(n, dtype=torch.bool)
    counts = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        row = d[i]
        best = row.min()
        if not torch.isfinite(best):
            continue
        keep = row < threshold * best if best > 0 else row <= best
        recon[i] = cands_c[keep].mean(0)
        matched[i], counts[i] = True, int(keep.sum())
    original = train_c + mean
    scaled = minmax(recon + mean)
    ssim3 = kornia_ssim(scaled, original, 3)
    ssim_sk = skimage_ssim(scaled, original)
    corr = correlation(recon, train_c)                    # in the centred space, as the papers' NCC
    corr_mean = correlation(recon + mean, original)       # after adding the mean image back to both
    nan = torch.full((n,), float("nan"), dtype=torch.float64)
    ssim3, ssim_sk, corr, corr_mean = (torch.where(matched, v.double(), nan)
                                       for v in (ssim3, ssim_sk, corr, corr_mean))
    # without best-buddy and averaging: each training image's single nearest candidate (full resolution NCC)
    d_full = ncc_distance(train_c, cands_c, 1)
    nearest = d_full.argmin(dim=1)
    corr_nearest = correlation(cands_c[nearest], train_c)
    return {"ssim_w3": ssim3, "ssim_skimage": ssim_sk, "corr": corr, "corr_with_mean": corr_mean,
            "corr_nearest": corr_nearest.double(),
            "matched": matched, "n_averaged": counts, "recon_scaled": scaled}


def summary(scores: dict[str, Any], top: int = 5) -> dict[str, Any]:
    def good(v: torch.Tensor, thr: float) -> int:
        return int((torch.nan_to_num(v, nan=-1.0) > thr).sum())

    s3 = torch.nan_to_num(scores["ssim_w3"], nan=-1.0).sort(descending=True).values
    return {
        "n_train": len(scores["matched"]), "matched": int(scores["matched"].sum()),
        "good_ssim_w3>0.4": good(scores["ssim_w3"], 0.4),
        "good_ssim_skimage>0.4": good(scores["ssim_skimage"], 0.4),
        "corr>0.9 (protocol match)": good(scores["corr"], 0.9),
        "corr>0.9 (nearest candidate)": good(scores["corr_nearest"], 0.9),
        "corr>0.9 (protocol match, mean added)": good(scores["corr_with_mean"], 0.9),
        f"mean ssim_w3 of top {top}": float(s3[:top].mean()),
        "mean ssim_w3 (matched)": float(np.nanmean(scores["ssim_w3"].numpy())),
        "mean ssim_skimage (matched)": float(np.nanmean(scores["ssim_skimage"].numpy())),
        "ssim_w3 sorted": [round(float(v), 3) for v in s3 if v > -1],
        "corr sorted": [round(float(v), 3) for v in
                        torch.nan_to_num(scores["corr"], nan=-1.0).sort(descending=True).values if v > -1],
    }


def ssim_windows(scaled: torch.Tensor, original: torch.Tensor, matched: torch.Tensor) -> dict[str, Any]:
    """Why window-3 and scikit-image SSIM disagree: each variant's SSIM map averaged separately over *flat*
    windows (the original's local std below 0.01, e.g. MNIST background) and *textured* ones, and the share of
    flat windows that each variant averages over (scikit-image crops a 3-pixel border and averages 7x7 windows)."""
    import kornia
    from scipy.ndimage import uniform_filter
    from skimage.metrics import structural_similarity

    a, b = scaled[matched].double(), original[matched].double()
    map3 = kornia.metrics.ssim(a, b, window_size=3, max_val=1.0).numpy()
    # local std of the original under each variant's window (kornia: 3x3 Gaussian sigma 1.5; skimage: 7x7 uniform)
    g = kornia.filters.get_gaussian_kernel2d((3, 3), (1.5, 1.5)).double().reshape(1, 3, 3)
    mu = kornia.filters.filter2d(b, g, border_type="reflect")
    std3 = (kornia.filters.filter2d(b * b, g, border_type="reflect") - mu * mu).clamp_min(0).sqrt().numpy()
    out: dict[str, Any] = {}
    flat3 = std3 < 0.01
    out["w3"] = {"flat_share": float(flat3.mean()), "mean_ssim_flat": float(map3[flat3].mean()),
                 "mean_ssim_textured": float(map3[~flat3].mean()), "mean_ssim": float(map3.mean())}
    maps, flats = [], []
    for x, y in zip(a.numpy(), b.numpy(), strict=True):
        _, m = structural_similarity(x, y, data_range=1.0, channel_axis=0, full=True)
        m7 = uniform_filter(y, size=(1, 7, 7))
        s7 = np.sqrt(np.clip(uniform_filter(y * y, size=(1, 7, 7)) - m7 * m7, 0, None))
        maps.append(m[:, 3:-3, 3:-3])
        flats.append(s7[:, 3:-3, 3:-3] < 0.01)
    msk, fsk = np.stack(maps), np.stack(flats)
    out["skimage"] = {"flat_share": float(fsk.mean()), "mean_ssim_flat": float(msk[fsk].mean()) if fsk.any() else None,
                      "mean_ssim_textured": float(msk[~fsk].mean()), "mean_ssim": float(msk.mean())}
    return out


def evaluate_result(result_dir: str | Path, runs: str = "all", data_root: str | None = None,
                    threshold: float = 1.1, start: bool = False,
                    card_path: str | None = None) -> dict[str, Any]:
    """Score a result folder's candidates (``start``: the starting candidates x0, as a baseline).

    Works on a finished folder (result.json, candidates.safetensors) and, given ``card_path``, on one whose
    search is still running (the runs/run-*.safetensors written so far).
    """
    from safetensors.torch import load_file

    from reconbench.targets.cards import load_card

    out = Path(result_dir)
    if (out / "result.json").exists():
        result = json.loads((out / "result.json").read_text())
        card = load_card(card_path or result["target"]["card"])
        pooled = load_file(str(out / "candidates.safetensors"))
        selection = {k: v["run"] for k, v in result["selection"].items()}
    else:
        if card_path is None:
            raise SystemExit(f"{out} has no result.json yet: pass --card CARD_FOLDER to score its runs")
        card = load_card(card_path)
        files = sorted((out / "runs").glob("*.safetensors"))
        parts = [(int(f.stem.split("-")[1]), load_file(str(f))) for f in files]
        pooled = {key: torch.cat([t[key] for _, t in parts]) for key in ("candidates", "x0")}
        pooled["run_ids"] = torch.cat([torch.full((len(t["candidates"]),), k) for k, t in parts])
        selection = {}
    problem = card.problem(data_root)
    keep = torch.ones(len(pooled["run_ids"]), dtype=torch.bool)
    if runs in ("blind", "oracle"):
        keep = pooled["run_ids"] == selection[runs]
    elif runs != "all":
        keep = torch.isin(pooled["run_ids"], torch.tensor([int(r) for r in runs.split(",")]))
    cands = pooled["x0" if start else "candidates"][keep].double()
    scores = match(problem.x_train(torch.float64), cands, problem.mean_tensor()[None], threshold=threshold)
    original = problem.x_train(torch.float64) + problem.mean_tensor()[None]
    return {"runs": runs, "scored": "x0 (starting candidates)" if start else "candidates",
            "candidates": int(keep.sum()), **summary(scores),
            "ssim_windows": ssim_windows(scores["recon_scaled"], original, scores["matched"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result_dir")
    ap.add_argument("--runs", default="all", help="all | blind | oracle | comma-separated run ids")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--threshold", type=float, default=1.1, help="averaging threshold B")
    ap.add_argument("--start", action="store_true", help="score the starting candidates x0 (chance baseline)")
    ap.add_argument("--card", default=None, help="model card folder (needed before result.json is written)")
    args = ap.parse_args()
    print(json.dumps(evaluate_result(args.result_dir, args.runs, args.data_root, args.threshold, args.start,
                                     args.card), indent=1))


if __name__ == "__main__":
    main()
