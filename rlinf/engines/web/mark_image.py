"""Set-of-marks on a screenshot, drawn in Python: each marked element's box and its number.

The policy of a run with ``context_config.observation: screenshot`` or ``both`` and
``interaction_mode: set_of_marks`` sees the page as a PNG on which every interactive element
that :data:`~rlinf.engines.web.observe.MARK_JS` numbered carries a coloured frame and a label
with its mark, the same ``n`` the text tree writes as ``[n]`` and ``click [n]`` names (WebGym
draws its marks onto the screenshot the same way). Drawing here, on the PNG the browser took
without marks, rather than in the page, keeps the page untouched and the boxes exactly those of
the element list the episode read.

Rules: a frame is clipped to the image (an element partly out of view keeps the visible part;
one wholly outside is skipped); the colour depends on the mark number only (stable from step to
step); frames are two pixels of a saturated colour inside a one-pixel dark outline, so they show
on light and dark pages; the label is a filled tag in the frame's colour above the box's top-left
corner (inside the box when there is no room above), moved left / down so it stays within the
image, with its number in black or white, whichever contrasts with the tag.

Example:
    >>> from PIL import Image
    >>> image = Image.new("RGB", (200, 100), "white")
    >>> drawn, placed = draw_marks(image, [{"id": 3, "box": [20, 30, 60, 20]}])
    >>> placed[0].mark, placed[0].frame, drawn.getpixel((20, 40)) != (255, 255, 255)
    (3, (20, 30, 79, 49), True)
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from PIL import Image, ImageDraw, ImageFont

#: mark colours (RGB), picked by ``mark % len``: saturated, mid luminance (seen on white and black)
PALETTE = ((230, 25, 75), (60, 180, 75), (67, 99, 216), (245, 130, 49), (145, 30, 180),
           (0, 150, 150), (240, 50, 230), (154, 99, 36), (128, 128, 0), (0, 130, 200))
#: the outline around every frame and tag (dark, so a frame on a light colour of its own hue shows)
OUTLINE = (20, 20, 20)
#: pixel size of the label font (the default font is scalable with FreeType; else its bitmap font)
LABEL_SIZE = 12


@dataclass(frozen=True)
class MarkPlacement:
    """Where one mark was drawn: ``frame`` and ``label`` as inclusive pixel rectangles
    ``(x0, y0, x1, y1)`` inside the image, ``colour`` the frame's RGB."""

    mark: int
    frame: tuple[int, int, int, int]
    label: tuple[int, int, int, int]
    colour: tuple[int, int, int]


def mark_colour(mark: int) -> tuple[int, int, int]:
    """The colour of mark ``mark`` (the same for the same number, every step).

    >>> mark_colour(1) == mark_colour(11), mark_colour(1) == mark_colour(2)
    (True, False)
    """
    return PALETTE[mark % len(PALETTE)]


def _text_colour(colour: tuple[int, int, int]) -> tuple[int, int, int]:
    r, g, b = colour
    return (0, 0, 0) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else (255, 255, 255)


@cache
def _font() -> Any:
    try:
        return ImageFont.load_default(size=LABEL_SIZE)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def clip_box(box: Iterable[float], width: int, height: int, scale: float = 1.0) -> tuple[int, int, int, int] | None:
    """An ``[x, y, w, h]`` box (CSS pixels; ``scale`` = image pixels per CSS pixel) as the
    inclusive pixel rectangle it covers inside a ``width`` x ``height`` image; None when nothing
    of it is inside.

    >>> clip_box([-5, 10, 20, 5], 100, 50), clip_box([120, 0, 10, 10], 100, 50)
    ((0, 10, 14, 14), None)
    """
    x, y, w, h = (float(v) * scale for v in box)
    x0, y0 = max(0, round(x)), max(0, round(y))
    x1, y1 = min(width - 1, round(x + w) - 1), min(height - 1, round(y + h) - 1)
    if x1 < x0 or y1 < y0:
        return None
    return x0, y0, x1, y1


def _label_rect(frame: tuple[int, int, int, int], size: tuple[int, int], width: int,
                height: int) -> tuple[int, int, int, int]:
    tw, th = min(size[0], width), min(size[1], height)
    x0 = min(frame[0], width - tw)
    y0 = frame[1] - th if frame[1] - th >= 0 else frame[1]  # above the box, else inside its top
    y0 = min(max(0, y0), height - th)
    return x0, y0, x0 + tw - 1, y0 + th - 1


def draw_marks(image: Image.Image, elements: Iterable[Mapping[str, Any]],
               scale: float = 1.0) -> tuple[Image.Image, list[MarkPlacement]]:
    """A copy of ``image`` (RGB) with each element's frame and mark drawn, and where each went.

    ``elements`` are the ``{"id", "box": [x, y, w, h]}`` items of the page's element list
    (``ac_tree``'s ``elements``); ``id`` is the mark the text tree shows as ``[id]``. Elements
    wholly outside the image get no placement. Labels are drawn after all frames, so a frame
    never covers a number.

    >>> img = Image.new("RGB", (50, 40), "black")
    >>> [p.mark for p in draw_marks(img, [{"id": 1, "box": [5, 5, 10, 10]}, {"id": 2, "box": [90, 5, 5, 5]}])[1]]
    [1]
    """
    out = image.convert("RGB")
    if out is image:
        out = image.copy()
    width, height = out.size
    draw = ImageDraw.Draw(out)
    font = _font()
    placed: list[MarkPlacement] = []
    for element in elements:
        frame = clip_box(element["box"], width, height, scale)
        if frame is None:
            continue
        mark = int(element["id"])
        colour = mark_colour(mark)
        x0, y0, x1, y1 = frame
        draw.rectangle(frame, outline=OUTLINE, width=1)
        if x1 - x0 >= 2 and y1 - y0 >= 2:
            draw.rectangle((x0 + 1, y0 + 1, x1 - 1, y1 - 1), outline=colour, width=2)
        else:  # a sliver: fill it
            draw.rectangle(frame, fill=colour)
        text = str(mark)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        size = (right - left + 6, bottom - top + 4)
        placed.append(MarkPlacement(mark, frame, _label_rect(frame, size, width, height), colour))
    for p in placed:
        draw.rectangle(p.label, fill=p.colour, outline=OUTLINE, width=1)
        left, top, _, _ = draw.textbbox((0, 0), str(p.mark), font=font)
        draw.text((p.label[0] + 3 - left, p.label[1] + 2 - top), str(p.mark), fill=_text_colour(p.colour), font=font)
    return out, placed


def draw_marks_png(png: bytes, elements: Iterable[Mapping[str, Any]], scale: float = 1.0) -> bytes:
    """:func:`draw_marks` on PNG bytes, giving PNG bytes (what the episode hands the policy).

    >>> buf = io.BytesIO(); Image.new("RGB", (30, 30), "white").save(buf, "PNG")
    >>> draw_marks_png(buf.getvalue(), [{"id": 1, "box": [2, 2, 20, 20]}])[:4]
    b'\\x89PNG'
    """
    with Image.open(io.BytesIO(png)) as image:
        drawn, _ = draw_marks(image, elements, scale)
    buf = io.BytesIO()
    drawn.save(buf, format="PNG")
    return buf.getvalue()
