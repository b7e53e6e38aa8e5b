"""The one layout of reconstructions beside their training images, shared by every figure that shows them.

The run's ``reconstructions.png`` (and so the audit report, which embeds it), the board's "Sample reconstructions
per attack" figure and the site's cell pages all call :func:`draw_pairs`. Each pair is drawn the same way:

* the reconstruction (the candidate the evaluation matched, averaged as it averages them) **above** the training
  image it matched, in one column, both scaled up by the same whole factor (nearest neighbour, no smoothing);
* above the pair, three label lines: ``#i`` (the training image's index in the training set), ``SSIM`` (the papers'
  score of the pair) and ``d`` (the matching distance of the best candidate, as the evaluation's per-image
  ``best_distance``); a missing value is printed as ``-``;
* a green frame around the pair when it passes the headline the figure names (the calibrated headline when the null
  was drawn); a training image that no candidate chose has a grey box where its reconstruction would be;
* pairs fill rows of ``per_row`` left to right, in the order given (callers pass them best first); groups (one per
  attack on a board) each start on a new row under their own title line.

The figure is drawn as one raster (``figimage``: one PNG pixel per canvas pixel, so a pair's position in the file
is exact) with the labels as text on top. Where every pair lies is returned as a :class:`PairLayout` and stored in
the PNG itself (a ``tEXt`` chunk, :data:`LAYOUT_KEY`), so a figure can be checked against what it claims to show
without re-drawing it (:func:`read_layout`).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

#: the PNG text chunk holding the layout (JSON)
LAYOUT_KEY = "reconbench-pairs"
#: the layout's format
LAYOUT_FORMAT = "reconbench-pair-layout/1"
#: each image is scaled up by a whole factor until it is at least this many pixels high
MIN_TILE = 48
DPI = 100
GAP = 2            # between a reconstruction and its training image
FRAME = 2          # width of the green frame
COLUMN_GAP = 10
LABEL_BAND = 30    # three label lines above each pair
ROW_GAP = 8
GROUP_BAND = 16    # a group's title line
TITLE_LINE = 12
EDGE = 6
PASSED_RGB = (0.0, 0.6, 0.0)
UNMATCHED_RGB = (0.85, 0.85, 0.85)

Box = tuple[int, int, int, int]   # x0, y0, x1, y1 in PNG pixels from the top left, ends exclusive


@dataclass(frozen=True)
class Pair:
    """One training image and the reconstruction the evaluation matched to it (images (C, H, W) in [0, 1])."""

    index: int
    train: np.ndarray
    candidate: np.ndarray | None     # None: no candidate chose this training image
    ssim: float | None = None
    distance: float | None = None
    passed: bool = False


@dataclass(frozen=True)
class PairGroup:
    title: str
    pairs: Sequence[Pair]


@dataclass(frozen=True)
class PlacedPair:
    """Where one pair was drawn and what its labels say."""

    group: int
    index: int
    candidate: Box | None
    train: Box
    label: list[str]
    passed: bool


@dataclass(frozen=True)
class PairLayout:
    width: int
    height: int
    zoom: int
    per_row: int
    groups: list[str]
    pairs: list[PlacedPair] = field(default_factory=list)
    format: str = LAYOUT_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PairLayout:
        d = json.loads(text)
        if not isinstance(d, dict) or "format" not in d:
            raise ValueError(f"not a pair layout (it names no format, expected {LAYOUT_FORMAT!r})")
        if d["format"] != LAYOUT_FORMAT:
            raise ValueError(f"not a pair layout ({d['format']!r}, expected {LAYOUT_FORMAT!r})")
        pairs = [PlacedPair(p["group"], p["index"], None if p["candidate"] is None else tuple(p["candidate"]),
                            tuple(p["train"]), list(p["label"]), p["passed"]) for p in d["pairs"]]
        return cls(d["width"], d["height"], d["zoom"], d["per_row"], list(d["groups"]), pairs)

    def arrangement(self) -> list[tuple[int, list[str], bool, tuple[int, int] | None]]:
        """What a reader sees, independent of image size: per pair its index, labels, frame and the candidate's
        offset from its training image in tiles (``(0, -1)``: directly above)."""
        out = []
        for p in self.pairs:
            offset = None
            if p.candidate is not None:
                tw, th = p.train[2] - p.train[0], p.train[3] - p.train[1]
                offset = (round((p.candidate[0] - p.train[0]) / tw), round((p.candidate[1] - p.train[1]) / th))
            out.append((p.index, p.label, p.passed, offset))
        return out


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def pair_label(p: Pair) -> list[str]:
    """The three label lines of a pair: its index, SSIM and matching distance."""
    return [f"#{p.index}", f"SSIM {_fmt(p.ssim, '.2f')}", f"d {_fmt(p.distance, '.3g')}"]


def _zoom(h: int) -> int:
    return max(1, math.ceil(MIN_TILE / max(h, 1)))


def layout_pairs(groups: Sequence[PairGroup], shape: tuple[int, int], per_row: int,
                 title_lines: int = 0) -> PairLayout:
    """Where each pair goes (no drawing): images of ``shape`` (H, W), ``per_row`` pairs a row."""
    per_row = max(per_row, 1)
    zoom = _zoom(shape[0])
    th, tw = shape[0] * zoom, shape[1] * zoom
    pitch_x = tw + 2 * FRAME + COLUMN_GAP
    pitch_y = LABEL_BAND + 2 * th + GAP + 2 * FRAME + ROW_GAP
    widest = max([min(len(g.pairs), per_row) for g in groups] + [1])
    width = 2 * EDGE + widest * pitch_x - COLUMN_GAP
    y = EDGE + title_lines * TITLE_LINE
    placed = []
    for gi, g in enumerate(groups):
        if g.title:
            y += GROUP_BAND
        rows = math.ceil(len(g.pairs) / per_row)
        for k, p in enumerate(g.pairs):
            r, c = divmod(k, per_row)
            x0 = EDGE + c * pitch_x + FRAME
            y0 = y + r * pitch_y + LABEL_BAND + FRAME
            cand = (x0, y0, x0 + tw, y0 + th)
            train = (x0, y0 + th + GAP, x0 + tw, y0 + 2 * th + GAP)
            placed.append(PlacedPair(gi, p.index, cand if p.candidate is not None else None, train, pair_label(p),
                                     bool(p.passed)))
        y += rows * pitch_y
    return PairLayout(width, max(y + EDGE, 2 * EDGE + 1), zoom, per_row, [g.title for g in groups], placed)


def _rgb(img: np.ndarray, zoom: int) -> np.ndarray:
    """(C, H, W) in [0, 1] -> (H * zoom, W * zoom, 3), each pixel repeated (nearest neighbour)."""
    x = np.clip(np.nan_to_num(np.asarray(img, dtype=np.float64), nan=0.0), 0.0, 1.0)
    x = np.repeat(x, 3, axis=0) if x.shape[0] == 1 else x[:3]
    x = np.transpose(x, (1, 2, 0))
    return np.repeat(np.repeat(x, zoom, axis=0), zoom, axis=1)


def canvas(groups: Sequence[PairGroup], layout: PairLayout) -> np.ndarray:
    """The raster of the figure (height, width, 3) in [0, 1]: white, the tiles and the green frames."""
    out = np.ones((layout.height, layout.width, 3))
    pairs = [p for g in groups for p in g.pairs]
    for p, at in zip(pairs, layout.pairs, strict=True):
        x0, y0, x1, y1 = at.train
        out[y0:y1, x0:x1] = _rgb(p.train, layout.zoom)
        top = (x0, y0 - (y1 - y0) - GAP, x1, y0 - GAP)
        if at.candidate is not None and p.candidate is not None:
            cx0, cy0, cx1, cy1 = at.candidate
            out[cy0:cy1, cx0:cx1] = _rgb(p.candidate, layout.zoom)
        else:
            out[top[1]:top[3], top[0]:top[2]] = UNMATCHED_RGB
        if at.passed:
            fx0, fy0, fx1, fy1 = x0 - FRAME, top[1] - FRAME, x1 + FRAME, y1 + FRAME
            out[fy0:fy0 + FRAME, fx0:fx1] = PASSED_RGB
            out[fy1 - FRAME:fy1, fx0:fx1] = PASSED_RGB
            out[fy0:fy1, fx0:fx0 + FRAME] = PASSED_RGB
            out[fy0:fy1, fx1 - FRAME:fx1] = PASSED_RGB
    return out


def draw_pairs(path: Path, groups: Sequence[PairGroup], *, title: Sequence[str] = (), per_row: int = 10) -> PairLayout:
    """Draw ``groups`` of pairs into the PNG ``path`` (see the module docstring); where each pair went.

    Every image must have the same (C, H, W). Drawn as one raster plus text (a grid of axes is ten times slower for
    60 pairs).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    first = next((p for g in groups for p in g.pairs), None)
    if first is None:
        raise ValueError("no pair to draw")
    shape = (int(first.train.shape[-2]), int(first.train.shape[-1]))
    for p in (p for g in groups for p in g.pairs):
        for img in (p.train, p.candidate):
            if img is not None and tuple(img.shape[-2:]) != shape:
                raise ValueError(f"pair #{p.index}: image {tuple(img.shape)} differs from the first {shape}; "
                                 "draw images of one size together")
    layout = layout_pairs(groups, shape, per_row, 0)
    chars = max(int(layout.width / 4.3), 40)  # about the width of a 7-point character at this dpi
    title = [part for line in title for part in textwrap.wrap(line, chars)]
    layout = layout_pairs(groups, shape, per_row, len(title))
    w, h = layout.width, layout.height
    fig = plt.figure(figsize=(w / DPI, h / DPI), dpi=DPI)
    # each value rounded to the nearest of the 256 levels (matplotlib would truncate a float image)
    levels = np.rint(canvas(groups, layout) * 255.0).astype(np.uint8)
    fig.figimage(levels, xo=0, yo=0, origin="upper", resize=False)

    def text(x: float, y: float, s: str, **kw: object) -> None:
        fig.text(x / w, 1.0 - y / h, s, **kw)  # type: ignore[arg-type]

    for k, line in enumerate(title):
        text(EDGE, EDGE + k * TITLE_LINE, line, fontsize=7, va="top", ha="left")
    group_top: dict[int, int] = {}
    for at in layout.pairs:
        x0, y0, x1, y1 = at.train
        cand_top = y0 - GAP - (y1 - y0)
        group_top.setdefault(at.group, cand_top - FRAME - LABEL_BAND)
        text((x0 + x1) / 2, cand_top - FRAME - 1, "\n".join(at.label), fontsize=6, ha="center", va="bottom",
             linespacing=1.1)
        if at.candidate is None:
            text((x0 + x1) / 2, cand_top + (y1 - y0) / 2, "none", fontsize=6, ha="center", va="center", color="0.4")
    for gi, name in enumerate(layout.groups):
        if name and gi in group_top:
            text(EDGE, group_top[gi] - 2, name, fontsize=8, ha="left", va="bottom")
    fig.savefig(path, dpi=DPI, metadata={LAYOUT_KEY: layout.to_json()})
    plt.close(fig)
    return layout


def read_layout(path: Path) -> PairLayout | None:
    """The layout stored in a PNG drawn by :func:`draw_pairs` (None when it holds none)."""
    from PIL import Image

    with Image.open(path) as im:
        text = getattr(im, "text", {}).get(LAYOUT_KEY) if hasattr(im, "text") else im.info.get(LAYOUT_KEY)
    return None if text is None else PairLayout.from_json(text)
