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
  attack on a board) each start on a new row under their own title line;
* images of different sizes (a board whose attacks' best cells are MNIST and CIFAR-10 targets) are drawn together:
  each group is scaled by its own whole factor (chosen from its tallest image) and its pairs sit in cells of its
  largest image, a smaller image centred in its cell, so every image keeps its own pixels (none is resampled or
  padded into another size); a grayscale image (one channel, or a 2-D array) is drawn grey, a colour one in colour.
  Where every image has one size, every group shares one scale and cells of exactly that size (no margins), and
  the layout record holds no per-group scales.

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
    #: each group's scale factor, recorded only where the groups' factors differ (else every group's is ``zoom``)
    group_zoom: list[int] | None = None

    def zoom_of(self, group: int) -> int:
        """The whole factor the images of group ``group`` are scaled up by."""
        return self.zoom if self.group_zoom is None else self.group_zoom[group]

    def to_json(self) -> str:
        d = asdict(self)
        if d["group_zoom"] is None:
            del d["group_zoom"]   # a figure of one scale records what it recorded before scales could differ
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PairLayout:
        d = json.loads(text)
        if not isinstance(d, dict) or "format" not in d:
            raise ValueError(f"not a pair layout (it names no format, expected {LAYOUT_FORMAT!r})")
        if d["format"] != LAYOUT_FORMAT:
            raise ValueError(f"not a pair layout ({d['format']!r}, expected {LAYOUT_FORMAT!r})")
        pairs = [PlacedPair(p["group"], p["index"], None if p["candidate"] is None else tuple(p["candidate"]),
                            tuple(p["train"]), list(p["label"]), p["passed"]) for p in d["pairs"]]
        zooms = d.get("group_zoom")
        return cls(d["width"], d["height"], d["zoom"], d["per_row"], list(d["groups"]), pairs,
                   group_zoom=None if zooms is None else [int(z) for z in zooms])

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


def image_chw(img: np.ndarray, index: int) -> np.ndarray:
    """``img`` as (C, H, W) with C 1 (grey) or 3 (colour): a 2-D image is one grey channel, a fourth channel
    (alpha) is dropped; anything else is refused with a one-line error naming the pair."""
    x = np.asarray(img)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[0] not in (1, 3, 4) or min(x.shape[1:]) < 1:
        raise ValueError(f"pair #{index}: image of shape {tuple(np.shape(img))} is neither (H, W), (1, H, W) nor "
                         "(3, H, W); pass grey images as (H, W) or (1, H, W) and colour ones as (3, H, W)")
    return x[:3]


def _hw(img: np.ndarray) -> tuple[int, int]:
    return int(img.shape[-2]), int(img.shape[-1])


def _group_images(g: PairGroup) -> list[np.ndarray]:
    return [img for p in g.pairs for img in (p.train, p.candidate) if img is not None]


@dataclass(frozen=True)
class _Block:
    """One group's geometry: the whole factor its images are scaled by and the cell (height, width) in PNG pixels
    each of its images is centred in."""

    zoom: int
    cell: tuple[int, int]


def _blocks(groups: Sequence[PairGroup], shape: tuple[int, int] | None) -> list[_Block]:
    """Each group's block: from ``shape`` (H, W) when given (every image has it), else from the group's own images;
    a group without images takes the first group's block."""
    sizes = [[shape] if shape is not None else [_hw(img) for img in _group_images(g)] for g in groups]
    fallback = next((s for s in sizes if s), [(1, 1)])
    return [_block(s or fallback) for s in sizes]


def _block(sizes: Sequence[tuple[int, int]]) -> _Block:
    """The block of a group whose images have ``sizes`` (H, W): scaled for its tallest, cells of its largest."""
    zoom = _zoom(max(h for h, _ in sizes))
    return _Block(zoom, (max(h for h, _ in sizes) * zoom, max(w for _, w in sizes) * zoom))


def _centred(x: int, y: int, cell: tuple[int, int], hw: tuple[int, int], zoom: int) -> Box:
    """The box of an image of ``hw`` pixels scaled by ``zoom``, centred in the cell whose top left is (x, y)."""
    h, w = hw[0] * zoom, hw[1] * zoom
    x0, y0 = x + (cell[1] - w) // 2, y + (cell[0] - h) // 2
    return (x0, y0, x0 + w, y0 + h)


def layout_pairs(groups: Sequence[PairGroup], shape: tuple[int, int] | None, per_row: int,
                 title_lines: int = 0) -> PairLayout:
    """Where each pair goes (no drawing), ``per_row`` pairs a row: every image of ``shape`` (H, W), or with ``shape``
    None each group at its own images' sizes (the module docstring)."""
    per_row = max(per_row, 1)
    blocks = _blocks(groups, shape)
    first = blocks[0] if blocks else _block([shape or (1, 1)])
    pitches = [b.cell[1] + 2 * FRAME + COLUMN_GAP for b in blocks]
    widest = max([min(len(g.pairs), per_row) * px for g, px in zip(groups, pitches, strict=True)]
                 + [first.cell[1] + 2 * FRAME + COLUMN_GAP])   # at least one column
    width = 2 * EDGE + widest - COLUMN_GAP
    y = EDGE + title_lines * TITLE_LINE
    placed = []
    for gi, (g, b, pitch_x) in enumerate(zip(groups, blocks, pitches, strict=True)):
        if g.title:
            y += GROUP_BAND
        ch = b.cell[0]
        pitch_y = LABEL_BAND + 2 * ch + GAP + 2 * FRAME + ROW_GAP
        rows = math.ceil(len(g.pairs) / per_row)
        for k, p in enumerate(g.pairs):
            r, c = divmod(k, per_row)
            x0 = EDGE + c * pitch_x + FRAME
            y0 = y + r * pitch_y + LABEL_BAND + FRAME
            own = shape if shape is not None else _hw(p.train)
            cand = None
            if p.candidate is not None:
                cand = _centred(x0, y0, b.cell, shape if shape is not None else _hw(p.candidate), b.zoom)
            train = _centred(x0, y0 + ch + GAP, b.cell, own, b.zoom)
            placed.append(PlacedPair(gi, p.index, cand, train, pair_label(p), bool(p.passed)))
        y += rows * pitch_y
    zooms = [b.zoom for b in blocks]
    return PairLayout(width, max(y + EDGE, 2 * EDGE + 1), first.zoom, per_row,
                      [g.title for g in groups], placed, group_zoom=zooms if len(set(zooms)) > 1 else None)


def _rgb(img: np.ndarray, zoom: int, index: int) -> np.ndarray:
    """(C, H, W) or (H, W) in [0, 1] of the pair ``index`` -> (H * zoom, W * zoom, 3), each pixel repeated (nearest
    neighbour); one channel is repeated into grey."""
    x = np.clip(np.nan_to_num(np.asarray(image_chw(img, index), dtype=np.float64), nan=0.0), 0.0, 1.0)
    x = np.repeat(x, 3, axis=0) if x.shape[0] == 1 else x[:3]
    x = np.transpose(x, (1, 2, 0))
    return np.repeat(np.repeat(x, zoom, axis=0), zoom, axis=1)


def _candidate_slot(train: Box, cell_h: int) -> Box:
    """Where a pair's reconstruction goes: the training image's box moved up by one cell and the gap (the grey
    box of a training image no candidate chose)."""
    x0, y0, x1, y1 = train
    return (x0, y0 - cell_h - GAP, x1, y1 - cell_h - GAP)


def _cell_heights(groups: Sequence[PairGroup], layout: PairLayout) -> list[int]:
    """Each group's cell height in PNG pixels, from the boxes the layout gives its images."""
    heights = [0] * len(groups)
    for at in layout.pairs:
        for box in (at.train, at.candidate):
            if box is not None:
                heights[at.group] = max(heights[at.group], box[3] - box[1])
    return heights


def canvas(groups: Sequence[PairGroup], layout: PairLayout) -> np.ndarray:
    """The raster of the figure (height, width, 3) in [0, 1]: white, the tiles and the green frames."""
    out = np.ones((layout.height, layout.width, 3))
    pairs = [p for g in groups for p in g.pairs]
    cell_h = _cell_heights(groups, layout)
    for p, at in zip(pairs, layout.pairs, strict=True):
        zoom = layout.zoom_of(at.group)
        x0, y0, x1, y1 = at.train
        out[y0:y1, x0:x1] = _rgb(p.train, zoom, p.index)
        slot = _candidate_slot(at.train, cell_h[at.group])
        if at.candidate is not None and p.candidate is not None:
            cx0, cy0, cx1, cy1 = at.candidate
            out[cy0:cy1, cx0:cx1] = _rgb(p.candidate, zoom, p.index)
            slot = at.candidate
        else:
            out[slot[1]:slot[3], slot[0]:slot[2]] = UNMATCHED_RGB
        if at.passed:
            fx0, fy0 = min(x0, slot[0]) - FRAME, slot[1] - FRAME
            fx1, fy1 = max(x1, slot[2]) + FRAME, y1 + FRAME
            out[fy0:fy0 + FRAME, fx0:fx1] = PASSED_RGB
            out[fy1 - FRAME:fy1, fx0:fx1] = PASSED_RGB
            out[fy0:fy1, fx0:fx0 + FRAME] = PASSED_RGB
            out[fy0:fy1, fx1 - FRAME:fx1] = PASSED_RGB
    return out


def draw_pairs(path: Path, groups: Sequence[PairGroup], *, title: Sequence[str] = (), per_row: int = 10) -> PairLayout:
    """Draw ``groups`` of pairs into the PNG ``path`` (see the module docstring); where each pair went.

    Images may differ in size and channels (each group drawn at its own size, the module docstring). Drawn as one
    raster plus text (a grid of axes is ten times slower for 60 pairs).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if not any(g.pairs for g in groups):
        raise ValueError("no pair to draw")
    for p in (p for g in groups for p in g.pairs):
        for img in (p.train, p.candidate):
            if img is not None:
                image_chw(img, p.index)
    layout = layout_pairs(groups, None, per_row, 0)
    chars = max(int(layout.width / 4.3), 40)  # about the width of a 7-point character at this dpi
    title = [part for line in title for part in textwrap.wrap(line, chars)]
    layout = layout_pairs(groups, None, per_row, len(title))
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
    cell_h = _cell_heights(groups, layout)
    for at in layout.pairs:
        x0, y0, x1, y1 = at.train
        ch = cell_h[at.group]
        row_top = y0 - (ch - (y1 - y0)) // 2 - GAP - ch   # the top of the row's cells (its images centred in them)
        group_top.setdefault(at.group, row_top - FRAME - LABEL_BAND)
        slot = at.candidate or _candidate_slot(at.train, ch)
        text((x0 + x1) / 2, slot[1] - FRAME - 1, "\n".join(at.label), fontsize=6, ha="center", va="bottom",
             linespacing=1.1)
        if at.candidate is None:
            text((x0 + x1) / 2, (slot[1] + slot[3]) / 2, "none", fontsize=6, ha="center", va="center", color="0.4")
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
