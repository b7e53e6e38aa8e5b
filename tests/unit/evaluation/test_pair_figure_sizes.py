"""Pairs of different image sizes and channel counts drawn in one figure (``evaluation/pair_figure.py``): every
image's pixels land unchanged where the layout record says, each group at its own whole scale; a figure whose images
share one size keeps the layout and raster of the one-size formulas written out here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from reconbench.evaluation import pair_figure as pf
from reconbench.evaluation.pair_figure import Pair, PairGroup, PairLayout, canvas, draw_pairs, layout_pairs, read_layout


def _levels(img: np.ndarray) -> np.ndarray:
    """An image (C, H, W) or (H, W) in [0, 1] as the 8-bit RGB levels (H, W, 3) a PNG of it holds."""
    x = np.asarray(img, dtype=np.float64)
    x = x[None] if x.ndim == 2 else x
    x = np.repeat(x, 3, axis=0) if x.shape[0] == 1 else x
    return np.rint(np.transpose(x, (1, 2, 0)) * 255.0).astype(np.int64)


def _png_levels(path: Path) -> np.ndarray:
    return np.rint(np.asarray(imread(path), dtype=np.float64)[..., :3] * 255.0).astype(np.int64)


def _crop(png: np.ndarray, box: tuple[int, int, int, int] | None, zoom: int) -> np.ndarray:
    assert box is not None
    x0, y0, x1, y1 = box
    block = png[y0:y1, x0:x1]
    # every source pixel is a zoom x zoom block of one colour (nearest neighbour, no smoothing)
    assert np.array_equal(block, np.repeat(np.repeat(block[::zoom, ::zoom], zoom, axis=0), zoom, axis=1))
    return block[::zoom, ::zoom]


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])


def _mixed_groups() -> list[PairGroup]:
    rng = np.random.default_rng(5)
    mnist = [Pair(i, rng.uniform(size=(1, 28, 28)), None if i == 2 else rng.uniform(size=(1, 28, 28)), 0.4, 0.1,
                  i == 0) for i in range(4)]
    cifar = [Pair(10 + i, rng.uniform(size=(3, 32, 32)), rng.uniform(size=(3, 32, 32)), 0.8, 0.05, i == 1)
             for i in range(5)]
    small = [Pair(20 + i, rng.uniform(size=(16, 16)), rng.uniform(size=(1, 16, 16))) for i in range(2)]
    return [PairGroup("a · mnist", mnist), PairGroup("b · cifar", cifar), PairGroup("c · 16 px", small)]


def test_mixed_sizes_draw_each_image_unchanged_where_the_record_says(tmp_path: Path) -> None:
    groups = _mixed_groups()
    path = tmp_path / "mixed.png"
    layout = draw_pairs(path, groups, title=["three sizes"], per_row=3)
    assert read_layout(path) == layout
    png = _png_levels(path)
    assert png.shape[:2] == (layout.height, layout.width)
    # 28 and 32 pixels high are scaled by 2, 16 by 3 (each to at least MIN_TILE pixels)
    assert layout.group_zoom == [math.ceil(pf.MIN_TILE / h) for h in (28, 32, 16)] == [2, 2, 3]
    pairs = [p for g in groups for p in g.pairs]
    boxes = []
    for p, at in zip(pairs, layout.pairs, strict=True):
        zoom = layout.zoom_of(at.group)
        h, w = p.train.shape[-2:]
        assert (at.train[2] - at.train[0], at.train[3] - at.train[1]) == (w * zoom, h * zoom)
        assert np.array_equal(_crop(png, at.train, zoom), _levels(p.train)), p.index
        boxes.append(at.train)
        if p.candidate is None:
            assert at.candidate is None
            continue
        assert at.candidate is not None
        assert np.array_equal(_crop(png, at.candidate, zoom), _levels(p.candidate)), p.index
        assert at.candidate[0] == at.train[0] and at.candidate[3] < at.train[1]   # directly above its training image
        boxes.append(at.candidate)
        if p.train.ndim == 2 or p.train.shape[0] == 1:   # grey stays grey
            crop = _crop(png, at.train, zoom)
            assert np.array_equal(crop[..., 0], crop[..., 1]) and np.array_equal(crop[..., 1], crop[..., 2])
    for k, a in enumerate(boxes):
        assert 0 <= a[0] and a[2] <= layout.width and 0 <= a[1] and a[3] <= layout.height
        assert not any(_overlap(a, b) for b in boxes[k + 1:])
    assert [at.label[0] for at in layout.pairs] == [f"#{p.index}" for p in pairs]


def test_a_group_mixing_sizes_centres_each_image_in_a_cell_of_its_largest() -> None:
    grey, colour = np.full((1, 28, 28), 0.25), np.full((3, 32, 32), 0.75)
    group = PairGroup("g", [Pair(0, grey, grey), Pair(1, colour, colour)])
    layout = layout_pairs([group], None, per_row=2)
    assert layout.group_zoom is None and layout.zoom == 2          # one scale for the whole figure
    small, large = layout.pairs
    # the 56-pixel image sits 4 pixels in from each side of the 64-pixel cell the 32-pixel image fills
    assert small.train[0] - (large.train[0] - (64 + 2 * pf.FRAME + pf.COLUMN_GAP)) == 4
    assert small.train[1] - large.train[1] == 4 and large.train[3] - small.train[3] == 4
    raster = canvas([group], layout)
    x0, y0, x1, y1 = small.train
    assert np.all(raster[y0:y1, x0:x1] == 0.25) and np.all(raster[y0 - 4:y0, x0:x1] == 1.0)   # white margin


def test_one_size_keeps_the_one_size_layout_and_raster(tmp_path: Path) -> None:
    """The boxes and raster of a one-size figure, from the one-size formulas written out here."""
    rng = np.random.default_rng(2)
    h, w, per_row, title_lines = 7, 5, 4, 2
    groups = [PairGroup("a", [Pair(i, rng.uniform(size=(1, h, w)), None if i == 2 else rng.uniform(size=(1, h, w)),
                                   passed=i % 3 == 0) for i in range(6)]),
              PairGroup("", [Pair(9, rng.uniform(size=(1, h, w)), rng.uniform(size=(1, h, w)), passed=True)])]
    zoom = math.ceil(pf.MIN_TILE / h)
    th, tw = h * zoom, w * zoom
    pitch_x = tw + 2 * pf.FRAME + pf.COLUMN_GAP
    pitch_y = pf.LABEL_BAND + 2 * th + pf.GAP + 2 * pf.FRAME + pf.ROW_GAP
    expected_boxes = []
    y = pf.EDGE + title_lines * pf.TITLE_LINE
    for g in groups:
        y += pf.GROUP_BAND if g.title else 0
        for k, p in enumerate(g.pairs):
            r, c = divmod(k, per_row)
            x0, y0 = pf.EDGE + c * pitch_x + pf.FRAME, y + r * pitch_y + pf.LABEL_BAND + pf.FRAME
            cand = (x0, y0, x0 + tw, y0 + th) if p.candidate is not None else None
            expected_boxes.append((cand, (x0, y0 + th + pf.GAP, x0 + tw, y0 + 2 * th + pf.GAP)))
        y += math.ceil(len(g.pairs) / per_row) * pitch_y
    layout = layout_pairs(groups, None, per_row, title_lines)
    assert layout == layout_pairs(groups, (h, w), per_row, title_lines)
    assert [(p.candidate, p.train) for p in layout.pairs] == expected_boxes
    assert (layout.width, layout.height, layout.zoom) == (2 * pf.EDGE + per_row * pitch_x - pf.COLUMN_GAP,
                                                          y + pf.EDGE, zoom)
    assert set(json.loads(layout.to_json())) == {"width", "height", "zoom", "per_row", "groups", "pairs", "format"}

    expected = np.ones((layout.height, layout.width, 3))
    pairs = [p for g in groups for p in g.pairs]
    for p, (cand, train) in zip(pairs, expected_boxes, strict=True):
        top = (train[0], train[1] - th - pf.GAP, train[2], train[1] - pf.GAP)
        expected[train[1]:train[3], train[0]:train[2]] = np.kron(p.train[0], np.ones((zoom, zoom)))[..., None]
        if cand is None:
            expected[top[1]:top[3], top[0]:top[2]] = pf.UNMATCHED_RGB
        else:
            assert p.candidate is not None
            expected[cand[1]:cand[3], cand[0]:cand[2]] = np.kron(p.candidate[0], np.ones((zoom, zoom)))[..., None]
        if p.passed:
            frame = np.zeros(expected.shape[:2], dtype=bool)
            fx0, fy0, fx1, fy1 = train[0] - pf.FRAME, top[1] - pf.FRAME, train[2] + pf.FRAME, train[3] + pf.FRAME
            frame[fy0:fy1, fx0:fx1] = True
            frame[fy0 + pf.FRAME:fy1 - pf.FRAME, fx0 + pf.FRAME:fx1 - pf.FRAME] = False
            expected[frame] = pf.PASSED_RGB
    np.testing.assert_array_equal(canvas(groups, layout), expected)

    path = tmp_path / "one.png"
    assert draw_pairs(path, groups, title=["t"], per_row=per_row) == layout_pairs(groups, (h, w), per_row, 1)
    assert "group_zoom" not in json.loads(_layout_text(path))


def _layout_text(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as im:
        return str(im.info[pf.LAYOUT_KEY])


def test_a_2d_image_draws_as_its_single_channel_3d_form() -> None:
    rng = np.random.default_rng(3)
    flat = rng.uniform(size=(9, 6))
    as_2d = [PairGroup("", [Pair(0, flat, flat[None])])]
    as_3d = [PairGroup("", [Pair(0, flat[None], flat[None])])]
    layout = layout_pairs(as_2d, None, per_row=3)
    assert layout == layout_pairs(as_3d, None, per_row=3)
    np.testing.assert_array_equal(canvas(as_2d, layout), canvas(as_3d, layout))


@pytest.mark.parametrize("shape", [(2, 8, 8), (1, 1, 8, 8), (5,)])
def test_an_image_that_is_neither_grey_nor_colour_is_refused_naming_its_pair(tmp_path: Path,
                                                                             shape: tuple[int, ...]) -> None:
    good = np.zeros((1, 8, 8))
    with pytest.raises(ValueError, match=r"pair #7: image of shape .* is neither"):
        draw_pairs(tmp_path / "x.png", [PairGroup("", [Pair(3, good, good), Pair(7, good, np.zeros(shape))])])
    assert not (tmp_path / "x.png").exists()


def test_group_scales_survive_the_record() -> None:
    layout = layout_pairs(_mixed_groups(), None, per_row=4)
    again = PairLayout.from_json(layout.to_json())
    assert again == layout and [again.zoom_of(g) for g in range(3)] == [2, 2, 3]
