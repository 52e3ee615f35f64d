"""Boxed-answer extraction: nesting, several boxes, unbalanced and empty boxes."""

import time

import pytest

from rlinf.rewards import extract_boxed_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The answer is \boxed{42}.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\frac{\sqrt{3}}{2^{x+1}}}", r"\frac{\sqrt{3}}{2^{x+1}}"),  # deeper nesting
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{3}", "3"),  # last box wins
        (r"\fbox{7}", "7"),
        (r"\boxed{1} and \fbox{8}", "8"),  # \fbox counts like \boxed
        (r"\boxed {4}", "4"),  # whitespace before the brace
        (r"\boxed{ 5 }", "5"),  # content is stripped
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are not group delimiters
        (r"\boxed{\left\{ x \right\}}", r"\left\{ x \right\}"),
        (r"\boxed{\boxed{3}}", "3"),  # nested boxes: the inner one opens last
        (r"}} stray \boxed{a}}}", "a"),  # unmatched closing braces are ignored
        (r"{\boxed{b}", "b"),  # an unclosed group around the box does not matter
        (r"\boxed{3} and a cut-off \boxed{\frac{4}{", "3"),  # unclosed last box is skipped
        (r"\\boxed{9}", "9"),  # doubly escaped (JSON-style) command
        ("\\boxed{\na\n}", "a"),  # newlines inside
        (r"\boxed{}", ""),  # empty box: present but empty
        (r"\boxed{   }", ""),
        (r"\boxed{\frac{1}{2}", None),  # the only box never closes
        (r"\boxed 5", None),  # only the braced form counts
        (r"\boxedx{1}", None),
        (r"\fboxed{1}", None),
        ("no box at all", None),
        ("", None),
        (None, None),
        (12, None),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_hostile_long_texts_are_linear():
    # 10k-character inputs that would be quadratic for a naive scan-per-box extractor.
    for text in ("\\boxed{" * 1500, "{" * 10000 + r"\boxed{1}", r"\boxed{" + "{" * 10000,
                 ("\\boxed{1}" * 1200)):
        start = time.perf_counter()
        extract_boxed_answer(text)
        print(f"{len(text)} chars: {1e3 * (time.perf_counter() - start):.2f} ms")
    assert extract_boxed_answer("\\boxed{" * 1500) is None
    assert extract_boxed_answer(r"\boxed{" + "{" * 10000) is None
    assert extract_boxed_answer("\\boxed{1}" * 1200) == "1"
