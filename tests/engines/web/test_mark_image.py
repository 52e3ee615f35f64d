"""Set-of-marks drawn on synthetic screenshots (rlinf/engines/web/mark_image.py): frames on the
boxes' borders on light and dark pages, clipped to the image, labels inside the image carrying
the element ids, colours fixed per mark."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from rlinf.engines.web.mark_image import PALETTE, clip_box, draw_marks, draw_marks_png, mark_colour

ELEMENTS = [{"id": 1, "box": [10, 40, 80, 24]}, {"id": 2, "box": [120, 40, 60, 30]},
            {"id": 7, "box": [30, 110, 150, 40]}]


def border_pixels(frame):
    x0, y0, x1, y1 = frame
    return ([(x, y0) for x in range(x0, x1 + 1)] + [(x, y1) for x in range(x0, x1 + 1)]
            + [(x0, y) for y in range(y0, y1 + 1)] + [(x1, y) for y in range(y0, y1 + 1)])


@pytest.mark.parametrize("background", [(255, 255, 255), (0, 0, 0), (128, 128, 128)])
def test_every_frame_border_changes_and_the_inside_stays(background):
    image = Image.new("RGB", (240, 180), background)
    drawn, placed = draw_marks(image, ELEMENTS)
    assert image.getpixel((10, 40)) == background  # the input is left as it was
    assert [p.mark for p in placed] == [1, 2, 7]
    for p, element in zip(placed, ELEMENTS):
        x, y, w, h = element["box"]
        assert p.frame == (x, y, x + w - 1, y + h - 1)
        assert all(drawn.getpixel(xy) != background for xy in border_pixels(p.frame))
        # the ring just inside the outline is the mark's colour, far from the page's own colour
        x0, y0, x1, y1 = p.frame
        assert drawn.getpixel(((x0 + x1) // 2, y1 - 1)) == p.colour == mark_colour(p.mark)
        assert max(abs(a - b) for a, b in zip(p.colour, background)) >= 60
        # the middle of the box (away from its label) is untouched
        assert drawn.getpixel(((x0 + x1) // 2, (y0 + y1) // 2 + 3)) == background


def test_labels_are_inside_the_image_and_show_the_mark_number():
    image = Image.new("RGB", (200, 120), "white")
    corners = [{"id": 3, "box": [0, 0, 40, 20]},          # no room above: label inside the box
               {"id": 12, "box": [185, 100, 40, 40]},     # runs off the right and bottom edges
               {"id": 4, "box": [-30, 60, 50, 20]}]       # starts left of the image
    drawn, placed = draw_marks(image, corners)
    pixels = np.asarray(drawn)
    for p in placed:
        x0, y0, x1, y1 = p.label
        assert 0 <= x0 <= x1 < 200 and 0 <= y0 <= y1 < 120, p
        tag = pixels[y0 + 1:y1, x0 + 1:x1]
        colours = {tuple(int(v) for v in c) for c in tag.reshape(-1, 3)}
        assert p.colour in colours  # the tag
        assert any(max(abs(a - b) for a, b in zip(c, p.colour)) >= 150 for c in colours)  # digits in contrast
    assert placed[1].frame == (185, 100, 199, 119)  # clipped to the image
    assert placed[2].frame == (0, 60, 19, 79)
    # two-digit marks get a wider tag than one-digit ones
    assert placed[1].label[2] - placed[1].label[0] > placed[0].label[2] - placed[0].label[0]


def test_elements_outside_are_skipped_and_colours_are_stable():
    image = Image.new("RGB", (100, 100), "white")
    _, placed = draw_marks(image, [{"id": 5, "box": [150, 10, 20, 20]}, {"id": 6, "box": [10, -40, 20, 30]},
                                   {"id": 8, "box": [10, 10, 20, 20]}])
    assert [p.mark for p in placed] == [8]
    assert clip_box([10, 95, 20, 20], 100, 100) == (10, 95, 29, 99)
    assert clip_box([0, 0, 10, 10], 100, 100, scale=2.0) == (0, 0, 19, 19)
    assert {mark_colour(m) for m in range(len(PALETTE))} == set(PALETTE)
    assert mark_colour(3) == mark_colour(3 + len(PALETTE))
    _, again = draw_marks(Image.new("RGB", (100, 100), "black"), [{"id": 8, "box": [0, 0, 5, 5]}])
    assert again[0].colour == placed[0].colour


def test_png_in_png_out_equals_the_image_path():
    buf = io.BytesIO()
    Image.new("RGB", (240, 180), (30, 30, 30)).save(buf, "PNG")
    out = draw_marks_png(buf.getvalue(), ELEMENTS)
    with Image.open(io.BytesIO(out)) as marked:
        assert marked.format == "PNG" and marked.size == (240, 180)
        expected, _ = draw_marks(Image.new("RGB", (240, 180), (30, 30, 30)), ELEMENTS)
        assert np.array_equal(np.asarray(marked.convert("RGB")), np.asarray(expected))
