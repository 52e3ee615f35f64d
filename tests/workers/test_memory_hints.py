"""A CUDA out-of-memory error in a worker step names the role, the step and the sizes to lower:
the FSDP actor (local backend, a patched engine method raising torch's own error) and the step
decorators' sizes; the message forms of cuBLAS / NCCL / CPU allocation failures are recognised."""

from __future__ import annotations

import os

import pytest
import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig, SamplingParams
from rlinf.data.prompt_dataset import PromptBatch
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.entry import one_line
from rlinf.scheduler import Cluster, WorkerGroup
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.errors import OutOfMemoryRaisedError
from rlinf.scheduler.memory_report import memory_error_kind, short_cause, worker_memory
from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
from rlinf.workers.memory_hints import generate_step
from tests.workers.test_fsdp_actor_worker import tiny_model

TORCH_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which "
             "9.94 MiB is free. Including non-PyTorch memory, this process has 79.14 GiB memory in use.")


@pytest.fixture
def local_actor(tmp_path):
    """A one-rank FSDP actor group of ``cluster.backend: local`` on a tiny model; the process's
    default process group and environment are undone after."""
    saved = dict(os.environ)
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
                                   "component_placement": {"actor": 0}})
    cluster = Cluster.from_config(cfg)
    algo = AlgorithmConfig(group_size=2, n_minibatches=1, training_batch_size_per_gpu=2,
                           logprob_forward_micro_batch_size=3)
    group = WorkerGroup.launch(cluster, FSDPActorWorker, cfg.plan(cluster.shape).component("actor"),
                               args=(tiny_model(tmp_path / "model"), ActorConfig(), algo, 10))
    yield group
    group.shutdown()
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)
    from rlinf.scheduler.backend import forget_cluster

    forget_cluster(cluster)  # new channels of this process are no longer its


def _batch() -> RolloutBatch:
    batch = RolloutBatch.from_token_lists([[1, 2], [1, 2], [3], [3]], [[4, 5, 6], [7], [8, 9], [10, 11, 12]], 0,
                                          group_size=2)
    batch.old_logprobs = torch.zeros(4, 3)
    batch.advantages = torch.ones(4, 3)
    return batch


def test_a_cuda_oom_in_the_actor_update_names_role_step_and_sizes(local_actor):
    engine = local_actor.actors[0].instance.engine

    def out_of_memory(*_args, **_kwargs):
        raise torch.cuda.OutOfMemoryError(TORCH_OOM)

    engine.train_minibatch = out_of_memory  # the engine, as a real step would hit it
    with pytest.raises(OutOfMemoryRaisedError) as err:
        local_actor.execute_each("update", [(_batch(), [9])]).wait(timeout=120)
    exc = err.value
    assert exc.device and exc.worker == "actor[0]" and exc.method == "update"
    exc.steps_done = 12  # what the run layer sets (rlinf.runners.recipe.run_once)
    line = one_line(exc)
    head = ("actor[0] on node 0 ran out of GPU memory in update() after 12 training steps (torch.OutOfMemoryError: "
            "CUDA out of memory, tried to allocate 2.00 GiB; node 0: ")
    assert line.startswith(head), line
    assert ("; algorithm.training_batch_size_per_gpu=2, 4 sequences of 5 tokens (data.max_prompt_length + "
            "algorithm.sampling_params.max_new_tokens); lower algorithm.training_batch_size_per_gpu (or "
            "runner.max_tokens_per_mbs), or set actor.model.gradient_checkpointing=true") in line
    assert line.endswith("GiB RSS)") and "actor[0]'s last peak " in line
    assert "\n" not in line and "Tried to allocate 2.00 GiB" in exc.remote_traceback


def test_a_cuda_oom_in_a_forward_pass_names_the_forward_micro_batch(local_actor):
    engine = local_actor.actors[0].instance.engine

    def out_of_memory(*_args, **_kwargs):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")

    engine.compute_logprobs = out_of_memory
    with pytest.raises(OutOfMemoryRaisedError) as err:
        local_actor.execute_each("compute_logprobs", [(_batch(),)]).wait(timeout=120)
    assert "ran out of GPU memory in compute_logprobs() (RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED" \
           in str(err.value)
    assert err.value.hint.startswith("algorithm.logprob_forward_micro_batch_size=3, 4 sequences of 5 tokens")
    # the worker is still usable: the same call without the patch answers
    del engine.compute_logprobs
    assert local_actor.execute_each("compute_logprobs", [(_batch(),)]).wait(timeout=120)[0].shape == (4, 3)


class _Prompt:
    def __init__(self, n):
        self.token_ids = list(range(n))


class _Rollout:
    @generate_step
    def generate(self, prompts, sampling, n, seed=None, chunk_prompts=None):
        raise RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error\nLast error:\n"
                           "Cuda failure 'out of memory'")


def test_the_rollout_step_names_prompts_group_size_and_new_tokens():
    with pytest.raises(RuntimeError) as err:
        _Rollout().generate(PromptBatch([_Prompt(7), _Prompt(12)]), SamplingParams(max_new_tokens=256), 4)
    sample = worker_memory(err.value)
    assert sample.oom == "device"
    assert sample.hint.describe().startswith(
        "prompts=2, algorithm.group_size=4, longest prompt (data.max_prompt_length)=12 tokens, "
        "algorithm.sampling_params.max_new_tokens=256; lower rollout.gpu_memory_utilization")


@pytest.mark.parametrize(("error", "kind"), [
    (torch.cuda.OutOfMemoryError(TORCH_OOM), "device"),
    (RuntimeError("Failed to CUDA calloc async 608 bytes"), "device"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)"), "host"),
    (MemoryError(), "host"),
    (ValueError("loss is nan"), None),
    (RuntimeError("the optimizer step failed"), None),
])
def test_out_of_memory_message_forms(error, kind):
    assert memory_error_kind(error) == kind
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = error
    assert memory_error_kind(wrapped) == kind  # raised from an out-of-memory error


def test_the_cause_keeps_torch_first_sentence_and_the_size():
    assert short_cause(f"torch.OutOfMemoryError: {TORCH_OOM}") == \
        "torch.OutOfMemoryError: CUDA out of memory, tried to allocate 2.00 GiB"
    assert short_cause("MemoryError") == "MemoryError"
    assert len(short_cause("RuntimeError: " + "x" * 500)) == 200
