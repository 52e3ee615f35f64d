"""Stop strings (``algorithm.sampling_params.stop``) applied to token outputs.

Engines that stop on strings themselves (vLLM) end a response at the token that completes a stop
string. The HF engine, given the tokenizer, does the same while decoding with
:class:`StopStringWatcher` (a row is finished at that token; the batch stops once every row has);
:func:`cut_at_stop` then cuts at the same place on every engine: the shortest prefix of tokens
whose decoded text contains a stop string (that token is kept, as an EOS token is). Log-probs are
cut alike and the finish reason becomes ``stop``.

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

import torch


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


class StopStringWatcher:
    """Marks rows whose response has just completed a stop string, while decoding.

    Called after each new token with the ``[b, P + t]`` tokens so far, it returns ``[b]`` bool:
    True for rows whose response (after ``prompt_len``) contains a stop string. Only the last
    ``window`` tokens of each row are decoded per call: a stop string of ``L`` characters spans
    at most ``L`` tokens that each add a character, and the check runs every step, so it is seen
    at the step that completes it. It has the ``StoppingCriteria`` call signature, so it serves
    ``model.generate`` (``stopping_criteria=``) and the lean loop alike.

    Example:
        >>> class Tok:
        ...     def batch_decode(self, rows, skip_special_tokens=True):
        ...         return ["".join(chr(96 + i) for i in r) for r in rows]
        >>> watch = StopStringWatcher(Tok(), ("bc",), prompt_len=1)
        >>> watch(torch.tensor([[2, 1, 2, 3], [2, 3, 3, 3]])).tolist()   # the prompt's "bc" does not count
        [True, False]
    """

    def __init__(self, tokenizer, stops: Sequence[str], prompt_len: int, extra_window: int = 8):
        self.tokenizer, self.stops, self.prompt_len = tokenizer, tuple(stops), prompt_len
        self.window = max((len(s) for s in self.stops), default=0) + extra_window

    def __call__(self, input_ids: torch.Tensor, scores=None, **_) -> torch.Tensor:
        start = max(self.prompt_len, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[:, start:].tolist(), skip_special_tokens=True)
        return torch.tensor([any(s in text for s in self.stops) for text in tails], dtype=torch.bool,
                            device=input_ids.device)
