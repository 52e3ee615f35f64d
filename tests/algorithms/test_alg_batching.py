"""Tests for first-fit-decreasing micro-batch packing, with a hypothesis property test."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlinf.algorithms import pack_micro_batches


def test_pack_hand_example():
    # longest first: 12 (over budget, alone), 5 -> new, 4 -> new (5 + 4 > 8), 3 -> with 5 (= 8), 2 -> with 4
    assert pack_micro_batches([5, 3, 4, 2, 12], 8) == [[4], [0, 1], [2, 3]]


def test_pack_ties_and_tensor_input():
    # equal lengths keep index order: 4, 4 fill the first batch, the next 4 opens a second
    assert pack_micro_batches(torch.tensor([4, 4, 4]), 8) == [[0, 1], [2]]
    assert pack_micro_batches([], 8) == []
    assert pack_micro_batches([0, 0, 9], 8) == [[2], [0, 1]]  # zero-length ones never join the oversize one


@pytest.mark.parametrize(
    "lengths, budget, match",
    [
        ([1, 2], 0, "max_tokens_per_mbs"),
        ([1, -2], 4, "seq_lengths"),
        ([1.5], 4, "seq_lengths"),
        (torch.tensor([1.0, 2.0]), 4, "seq_lengths"),
    ],
)
def test_pack_invalid(lengths, budget, match):
    with pytest.raises(ValueError, match=match):
        pack_micro_batches(lengths, budget)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=40), max_size=40),
    budget=st.integers(min_value=1, max_value=32),
)
def test_pack_properties(lengths, budget):
    batches = pack_micro_batches(lengths, budget)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
    totals = [sum(lengths[i] for i in b) for b in batches]
    for b, total in zip(batches, totals):
        assert b, "no empty micro-batch"
        assert total <= budget or (len(b) == 1 and lengths[b[0]] > budget)
        assert b == sorted(b)
    # first-fit: no two micro-batches could have been merged
    for x in range(len(totals)):
        for y in range(x + 1, len(totals)):
            assert totals[x] + totals[y] > budget
