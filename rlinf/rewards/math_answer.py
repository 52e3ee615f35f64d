"""Final-answer extraction from a model response: the content of the last closed ``\\boxed{}``.

Only the braced forms ``\\boxed{...}`` and ``\\fbox{...}`` count (whitespace between the
command and its brace is allowed). Braces are matched like TeX groups: escaped braces
``\\{`` / ``\\}`` do not open or close a group, so ``\\boxed{\\{1, 2\\}}`` yields
``\\{1, 2\\}``.

The scan is a single regex-driven pass over brace and backslash tokens from the first box on,
so a long (or hostile) response costs time linear in its length; text without a box returns
at once.
"""

from __future__ import annotations

import re

__all__ = ["extract_boxed_answer"]

# One token per match: a box opener (command + optional whitespace + "{"), any other escaped
# character (so "\{", "\}" and "\\" never count as group delimiters), or a bare brace.
# A run of backslashes before the command is taken as part of the opener, so a doubly
# escaped "\\boxed{3}" (as in JSON-escaped text) still counts as a box.
_TOKEN = re.compile(r"\\+(?:boxed|fbox)\s*\{|\\.|[{}]", re.DOTALL)
_FIRST_BOX = re.compile(r"\\+(?:boxed|fbox)\s*\{")


def extract_boxed_answer(text: str | None) -> str | None:
    """Return the stripped content of the last closed ``\\boxed{...}`` / ``\\fbox{...}``.

    "Last" means the box whose opening brace comes last among the boxes that are closed; a
    box that is never closed (e.g. a truncated generation) is skipped, so an earlier closed
    box still counts. For nested boxes the inner one opens last and wins.

    Args:
        text: A model response. ``None`` or a non-string is treated as having no box.

    Returns:
        The box content with surrounding whitespace removed (``""`` for ``\\boxed{}``), or
        ``None`` when the text has no closed box.

    Examples:
        >>> extract_boxed_answer(r"so x = \\boxed{\\frac{1}{2}}.")
        '\\\\frac{1}{2}'
        >>> extract_boxed_answer(r"\\boxed{1} then \\fbox{ 2 }")
        '2'
        >>> extract_boxed_answer(r"\\boxed{3} and a cut-off \\boxed{\\frac{4}{")
        '3'
        >>> extract_boxed_answer("no box here") is None
        True
    """
    if not isinstance(text, str):
        return None
    first = _FIRST_BOX.search(text)
    if first is None:
        return None
    stack: list[int] = []  # content start index for a box brace, -1 for a plain brace
    best_start = -1
    best: str | None = None
    # Groups opened before the first box cannot change how a box closes: scan from there.
    for match in _TOKEN.finditer(text, first.start()):
        token = match.group()
        if token[0] == "\\":
            if token[-1] == "{" and len(token) > 2:  # a box opener; other escapes are 2 chars
                stack.append(match.end())
            # any other escape ("\{", "\}", "\\", "\f"...) is not a delimiter
        elif token == "{":
            stack.append(-1)
        elif stack:  # "}" closing the innermost open group
            start = stack.pop()
            if start >= best_start and start != -1:
                best_start = start
                best = text[start:match.start()]
        # an unmatched "}" (nothing open) is ignored
    return None if best is None else best.strip()
