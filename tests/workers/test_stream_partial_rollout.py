"""A rollout rank's fully asynchronous stream (rlinf/workers/rollout/continuous.py) on a real HF
engine, no Ray: new weights arrive mid-generation, the unfinished rows continue under them, and
every token's log-prob and version is checked against a teacher-forced pass of the model version
that sampled it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import Prompt
from rlinf.scheduler.local.channel import LocalChannel
from rlinf.workers.rollout.generation_worker import GenerationWorker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer

SAMPLING = SamplingParams(max_new_tokens=24, min_new_tokens=24, do_sample=True, temperature=1.0, top_k=-1,
                          top_p=1.0)


class PausingEngine:
    """The worker's engine, with a hook: the ``at``-th poll of the first generate call sets
    ``mid`` (the test then sends weights) and waits until the pause was requested."""

    def __init__(self, engine, gate, at: int):
        self.engine, self.gate, self.at = engine, gate, at
        self.mid = threading.Event()
        self.calls = 0

    def generate(self, prompts, sampling, n=1, seed=None, should_stop=None):
        self.calls += 1
        polls = [0]

        def poll():
            polls[0] += 1
            if self.calls == 1 and polls[0] == self.at:
                self.mid.set()
                while not self.gate.pending():
                    threading.Event().wait(0.01)
            return should_stop() if should_stop else False

        return self.engine.generate(prompts, sampling, n=n, seed=seed, should_stop=poll)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def teacher_forced_logprobs(model, prompt, tokens):
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    p = len(prompt)
    return [float(logp[p - 1 + i, t]) for i, t in enumerate(tokens)]


@pytest.mark.parametrize("partial", [True, False])
def test_weights_mid_generation_keep_every_token_with_its_version(tmp_path, partial):
    from transformers import AutoModelForCausalLM

    path = tiny_model_with_tokenizer(tmp_path / "m")
    worker = GenerationWorker(path, RolloutConfig(backend="huggingface", partial_rollout=partial))
    old = AutoModelForCausalLM.from_pretrained(path).eval()
    new = AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine = PausingEngine(worker.engine, worker._gate, at=5)
    worker.engine = engine
    channel = LocalChannel.create(f"stream-test-{partial}")
    prompt = Prompt(3, (5, 6, 7), "x", "w5 w6 w7")
    channel.put(("g0", prompt, 11), key="in")
    stats = {}
    runner = threading.Thread(target=lambda: stats.update(
        worker.run_stream(channel, "in", "out", SAMPLING, n=2, max_episodes=2)))
    runner.start()
    assert engine.mid.wait(60)
    with worker._stream_parked(grace=True):  # what receive_weights does around the weight link
        worker.engine.load_weights(new.named_parameters())
        worker.policy_version = 1
    gid, batch = channel.get("out", timeout=60)
    worker.stop_stream()
    runner.join(60)
    assert gid == "g0" and batch.batch_size == 2
    models = {0: old, 1: new}
    for row in range(2):
        n = int(batch.response_mask[row].sum())
        assert n == 24  # no token lost or regenerated: min_new_tokens = max_new_tokens
        tokens = batch.response_ids[row, :n].tolist()
        versions = batch.token_versions[row, :n].tolist()
        assert versions == sorted(versions) and set(versions) <= {0, 1}
        if partial:  # stopped at a token boundary a few polls after the request, then continued
            assert versions[0] == 0 and versions[-1] == 1 and 5 <= versions.count(0) < 24
        else:  # in-flight rows finish on the old weights
            assert versions == [0] * 24
        expected = [teacher_forced_logprobs(models[v], prompt.token_ids, tokens)[i] for i, v in enumerate(versions)]
        got = batch.rollout_logprobs[row, :n].tolist()
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4
        assert batch.version_start[row] == versions[0] and batch.version_end[row] == versions[-1]
    assert stats["groups"] == 1 and stats["paused_rounds"] == (1 if partial else 0)
