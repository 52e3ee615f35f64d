"""Stop strings (``algorithm.sampling_params.stop``) applied to token outputs.

Engines that stop on strings themselves (vLLM) end a response at the token that completes a stop
string; the HF engine generates on and the response is cut here afterwards, at the same place:
the shortest prefix of tokens whose decoded text contains a stop string (that token is kept, as
an EOS token is). Log-probs are cut alike and the finish reason becomes ``stop``.

Example:
    >>> class Tok:
    ...     def decode(self, ids, skip_special_tokens=True):
    ...         return "".join(chr(96 + i) for i in ids)
    >>> cut_at_stop([1, 2, 3, 4], Tok(), ("bc",))
    3
    >>> cut_at_stop([1, 2], Tok(), ("zz",)) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence


def cut_at_stop(token_ids: Sequence[int], tokenizer, stops: Sequence[str]) -> int | None:
    """Length of the shortest prefix whose text contains one of ``stops``; None when none does."""
    if not stops or not token_ids:
        return None
    text = tokenizer.decode(list(token_ids), skip_special_tokens=True)
    if not any(s in text for s in stops):
        return None
    lo, hi = 1, len(token_ids)  # the property is monotone in the prefix length
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(list(token_ids[:mid]), skip_special_tokens=True) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    return lo
