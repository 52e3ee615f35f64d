"""What one step of a web episode shows the policy (``context_config.observation``).

:func:`observe` reads the page once: its URL and title, the element tree (``ac_tree``, which
also numbers the elements) and, for ``screenshot`` / ``both``, a PNG of the viewport taken right
after, without the in-page overlay. In ``set_of_marks`` mode the marks are drawn onto that PNG
in Python (:func:`rlinf.engines.web.mark_image.draw_marks_png`) from the element list the same
``ac_tree`` call returned, so the numbers on the image are the ``[n]`` of the text and of the
actions; in ``coordinates`` mode the PNG stays plain (its pixels are the actions' coordinates;
the browser's pages have device scale factor 1, so a CSS pixel is an image pixel).

The observation is a dict ``{"url", "title", "text", "screenshot"}``: ``text`` is ``""`` for
``screenshot``; ``screenshot`` is PNG bytes (compact through channels and Ray, and what a
processor opens with ``PIL.Image.open(io.BytesIO(png))``), or None for ``text``.

Example (needs a browser server)::

    obs = await observe(browser, iid, settings)            # doctest: +SKIP
    obs["screenshot"][:4]                                  # b'\\x89PNG'
"""

from __future__ import annotations

from typing import Any

from rlinf.engines.web.mark_image import draw_marks_png

#: the values of ``context_config.observation``; those that give the policy a screenshot
OBSERVATIONS = ("text", "screenshot", "both")
WITH_SCREENSHOT = ("screenshot", "both")


async def observe(browser: Any, iid: str, settings: Any) -> dict[str, Any]:
    """The page as the policy gets it under ``settings`` (an
    :class:`~rlinf.runners.web_agent.episode.EpisodeSettings`: ``observation``, ``mode``,
    ``rich_tree``), read from instance ``iid`` of ``browser`` (a browser client, or anything
    with its ``page_metadata`` / ``ac_tree`` / ``screenshot`` calls)."""
    if settings.observation not in OBSERVATIONS:
        raise ValueError(f"context_config.observation: expected one of {', '.join(OBSERVATIONS)}, "
                         f"got {settings.observation!r}")
    meta = await browser.page_metadata(iid)
    tree = await browser.ac_tree(iid, mode=settings.mode, rich=settings.rich_tree)
    text = "" if settings.observation == "screenshot" else tree.get("text", "")
    obs: dict[str, Any] = {"url": meta.get("url", ""), "title": meta.get("title", ""), "text": text,
                           "screenshot": None}
    if settings.observation in WITH_SCREENSHOT:
        png = await browser.screenshot(iid, marks=False)
        if settings.mode == "set_of_marks":
            png = draw_marks_png(png, tree.get("elements") or [])
        obs["screenshot"] = png
    return obs
