"""What the policy reads at each step, and how its reply becomes an action.

Two prompt versions (seed 000's ``model_config.prompt_version``):

* ``vanilla`` — the task, the page (title, URL, observation text) and the last
  ``history_length`` actions, then ``Action:``.
* ``complete`` — the same, preceded by the action grammar and the rules of the episode (one
  action per reply, answer when the page shows it, step budget).

``model_config.model_type: qwen3-think`` replies may open with a ``<think> ... </think>`` block;
:func:`reply_action_text` drops it before the action is parsed (``qwen3-instruct`` replies are
parsed as they are). URLs on the shipped sites are shown as paths (the server's port changes
from run to run; the policy should not have to read it).

Example:
    >>> obs = {"url": "http://127.0.0.1:8123/shop/", "title": "Shop", "text": '[1] link "Kettle"'}
    >>> print(render_prompt("vanilla", "Price of the Kettle?", obs, ["click [4]"], 3,
    ...                     site_base="http://127.0.0.1:8123"))
    Task: Price of the Kettle?
    Page: Shop (/shop/)
    [1] link "Kettle"
    Previous actions: click [4]
    Steps left: 3
    Action:
    >>> reply_action_text("<think>the kettle is [1]</think> click [1]", "qwen3-think")
    'click [1]'
"""

from __future__ import annotations

import re

GRAMMAR = {
    "set_of_marks": ('click [n] | type [n] "text" | type [n] "text" enter | scroll up | scroll down '
                     '| goback | answer "text"'),
    "coordinates": ('click (x, y) | type (x, y) "text" | type (x, y) "text" enter | scroll up '
                    '| scroll down | goback | answer "text"'),
}

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def show_url(url: str, site_base: str | None) -> str:
    """``url`` as the prompt shows it: a path on the shipped sites, else as it is."""
    if site_base and url.startswith(site_base.rstrip("/") + "/"):
        return url[len(site_base.rstrip("/")):]
    return url


def render_prompt(version: str, instruction: str, observation: dict, history: list[str], steps_left: int,
                  *, mode: str = "set_of_marks", site_base: str | None = None,
                  max_observation_chars: int = 6000, screenshot: bool = False) -> str:
    """The user message of one step (the chat template is applied by the caller); with
    ``screenshot`` (the policy is given the page as an image) and no text, the page line says so.

    >>> render_prompt("vanilla", "Find it", {"title": "Home", "url": "/"}, [], 3, screenshot=True).splitlines()[2]
    '(the page is shown in the screenshot)'
    """
    text = observation.get("text") or ("(the page is shown in the screenshot)" if screenshot else "")
    if len(text) > max_observation_chars:
        text = text[:max_observation_chars] + "\n[... truncated]"
    lines = []
    if version == "complete":
        lines += ["You browse a website to complete a task. Reply with exactly one action:",
                  GRAMMAR[mode],
                  "Use answer once the page shows what the task asks for.", ""]
    elif version != "vanilla":
        raise ValueError(f"prompt_version must be vanilla or complete, got {version!r}")
    lines += [f"Task: {instruction}",
              f"Page: {observation.get('title', '')} ({show_url(observation.get('url', ''), site_base)})",
              text,
              f"Previous actions: {'; '.join(history) if history else 'none'}",
              f"Steps left: {steps_left}",
              "Action:"]
    return "\n".join(lines)


def reply_action_text(reply: str, model_type: str) -> str:
    """The part of a model reply the action parser reads (think blocks removed for qwen3-think)."""
    if model_type == "qwen3-think":
        reply = _THINK.sub("", reply)
    return reply.strip()
