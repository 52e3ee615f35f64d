"""Prompt dataset and loader: filtering, seeded order, resume position, bad rows."""

from __future__ import annotations

import json

import pytest

from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows


def encode(text):
    return [ord(c) for c in text]


def make(n=10, **kw):
    rows = [{"prompt": "x" * (i % 4 + 1), "answer": str(i)} for i in range(n)]
    return PromptDataset(rows, encode, **kw)


def test_long_prompts_are_dropped_and_indices_kept():
    ds = make(max_prompt_length=2)  # lengths cycle 1,2,3,4: keep 1 and 2
    assert [p.index for p in ds.prompts] == [0, 1, 4, 5, 8, 9] and ds.dropped == 4
    with pytest.raises(ValueError, match="no prompt fits data.max_prompt_length=0"):
        make(max_prompt_length=0)


def test_seeded_epochs_differ_and_cover_everything():
    loader = PromptLoader(make(max_prompt_length=8), batch_size=3, shuffle=True, seed=7)
    e0 = [i for b in loader.epoch_batches() for i in b.indices]
    e1 = [i for b in loader.epoch_batches() for i in b.indices]
    assert len(e0) == 9 and len(set(e0)) == 9  # 10 prompts, batch 3: last partial batch dropped
    assert e0 != e1
    again = PromptLoader(make(max_prompt_length=8), batch_size=3, shuffle=True, seed=7)
    assert [i for b in again.epoch_batches() for i in b.indices] == e0


def test_resume_continues_exactly():
    full = PromptLoader(make(max_prompt_length=8), batch_size=3, shuffle=True, seed=1)
    reference = [full.next_batch().indices for _ in range(7)]
    first = PromptLoader(make(max_prompt_length=8), batch_size=3, shuffle=True, seed=1)
    [first.next_batch() for _ in range(4)]
    resumed = PromptLoader(make(max_prompt_length=8), batch_size=3, shuffle=True, seed=1)
    resumed.load_state_dict(first.state_dict())
    assert [resumed.next_batch().indices for _ in range(3)] == reference[4:]
    with pytest.raises(ValueError, match="data seed 1 != data.seed 2"):
        PromptLoader(make(max_prompt_length=8), 3, True, seed=2).load_state_dict(first.state_dict())


def test_jsonl_rows_name_file_and_line(tmp_path):
    good = tmp_path / "a.jsonl"
    good.write_text(json.dumps({"q": "1+1", "a": 2}) + "\n\n" + json.dumps({"q": "2+2", "a": 4}) + "\n")
    assert read_rows([str(good)], "q", "a") == [{"prompt": "1+1", "answer": "2"},
                                                 {"prompt": "2+2", "answer": "4"}]
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"q": "1+1"}) + "\n")
    with pytest.raises(ValueError, match=r"b.jsonl:1: row has no 'a' key"):
        read_rows([str(bad)], "q", "a")


def test_batch_larger_than_dataset_is_an_error():
    with pytest.raises(ValueError, match="batch size 20 exceeds the 10 usable prompts"):
        PromptLoader(make(max_prompt_length=8), batch_size=20, shuffle=False, seed=0)


def test_validation_loader_keeps_the_partial_last_batch():
    rows = [{"prompt": str(i), "answer": str(i)} for i in range(5)]
    ds = PromptDataset(rows, encode=lambda s: [1], max_prompt_length=4)
    val = PromptLoader(ds, batch_size=2, shuffle=False, seed=0, drop_last=False)
    assert [b.answers for b in val.epoch_batches()] == [["0", "1"], ["2", "3"], ["4"]]
    train = PromptLoader(ds, batch_size=2, shuffle=False, seed=0)
    assert [len(b.prompts) for b in train.epoch_batches()] == [2, 2]


def test_an_encoder_that_returns_no_token_ids_fails_at_once():
    with pytest.raises(TypeError, match="list of token ids"):
        PromptDataset([{"prompt": "a", "answer": "1"}], encode=lambda s: {"input_ids": [1]}, max_prompt_length=4)


_PARALLEL_CHECK = """
import os
from rlinf.data.prompt_dataset import PromptDataset, encode_all

texts = [f"{i} + {i * 7}" for i in range(50)]
encode = lambda s: [ord(c) for c in s]  # noqa: E731
assert encode_all(texts, encode, num_workers=2) == encode_all(texts, encode, num_workers=0)
pids = {p for ids in encode_all(texts, lambda s: [os.getpid()], num_workers=2) for p in ids}
assert pids and os.getpid() not in pids, pids  # forked workers did the encoding
rows = [{"prompt": t, "answer": "x"} for t in texts]
serial = PromptDataset(rows, encode, max_prompt_length=7)
parallel = PromptDataset(rows, encode, max_prompt_length=7, num_workers=2)
assert serial.prompts == parallel.prompts and serial.dropped == parallel.dropped > 0
print("ok")
"""


def test_num_workers_tokenise_in_parallel_with_the_same_result():
    """Run in a fresh interpreter, as the driver's preflight runs it (before Ray): forked from an
    xdist worker that hosted Ray's threads earlier, a child can wait for ever on a lock one of
    those threads held at the fork (stop of 2026-11-29: 300 s, then the limit)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PARALLEL_CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]
