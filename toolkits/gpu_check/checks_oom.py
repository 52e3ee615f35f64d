"""``oom_named``: a real CUDA out-of-memory error in an FSDP actor step is named in one line.

Not in the kit's default list; run it as an extra check::

    python -m toolkits.gpu_check --out OUT --only fsdp_bf16 --check oom_named=toolkits.gpu_check.checks_oom:run@180

An FSDP2 actor worker group (``cluster.backend: local``: the GPU machine has no Ray) is built on a
tiny random Qwen2; the worker's GPU is then filled (all but 1 MiB of what the allocator reports
free), so its next ``update()`` fails inside the forward pass with torch's own
``torch.OutOfMemoryError``. The driver's error must be an ``OutOfMemoryRaisedError`` whose one line
names ``actor[0]``, the step (``update()``), GPU memory, the GPU's figures, the micro-batch key
(``algorithm.training_batch_size_per_gpu``) and a CUDA peak; after the filler is freed the same
worker's next update must succeed. One update runs before the GPU is filled, as in training.

A dry run (CPU) cannot run out of GPU memory: the engine's ``train_minibatch`` raises
``torch.cuda.OutOfMemoryError`` with torch's message instead, and the same line is checked
(without the GPU figures and the CUDA peak).
"""

from __future__ import annotations

import os

import torch

from toolkits.gpu_check.common import TINY, actor_config, make_batch, save_random_qwen2
from toolkits.gpu_check.report import outcome
from toolkits.gpu_check.runner import Context

TORCH_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of "
                 "which 9.94 MiB is free.")


def _fill_gpu() -> list[torch.Tensor]:
    """Tensors holding all but about 1 MiB of the GPU memory the allocator reports free."""
    torch.cuda.empty_cache()
    held, chunk = [], None
    while True:
        free, _ = torch.cuda.mem_get_info()
        chunk = free - 2**20 if chunk is None else min(chunk, free - 2**20)
        if chunk < 2**20:
            return held
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            chunk //= 2


def run(ctx: Context) -> dict:
    """The check (see the module docstring)."""
    from rlinf.config.algorithm import AlgorithmConfig
    from rlinf.scheduler import Cluster, WorkerGroup
    from rlinf.scheduler.config import ClusterConfig
    from rlinf.scheduler.errors import OutOfMemoryRaisedError
    from rlinf.workers.actor.fsdp_actor import FSDPActorWorker

    on_gpu = ctx.device == "cuda" and not ctx.dry_run
    saved = dict(os.environ)
    model_dir = save_random_qwen2(ctx.scratch("oom_model"), seed=ctx.seed)
    cfg = ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 1,
                                   "component_placement": {"actor": 0}})
    cluster = Cluster.from_config(cfg)
    algo = AlgorithmConfig(group_size=1, n_minibatches=1, training_batch_size_per_gpu=4)
    group = WorkerGroup.launch(cluster, FSDPActorWorker, cfg.plan(cluster.shape).component("actor"),
                               args=(model_dir, actor_config(), algo, 10))
    try:
        batch = make_batch(TINY["vocab_size"], [32] * 8, [480] * 8, ctx.seed)
        batch.old_logprobs = torch.zeros(batch.response_ids.shape)
        args = [(batch, [batch.num_response_tokens])]
        engine = group.actors[0].instance.engine
        # One update first: FSDP2 sets its streams up lazily in the first forward, and an OOM in
        # the middle of that leaves the module unusable (seen on an H200); an OOM in training
        # comes after that.
        group.execute_each("update", args).wait(timeout=600)
        filler: list[torch.Tensor] = []
        if on_gpu:
            filler = _fill_gpu()
        else:
            def out_of_memory(*_a, **_k):
                raise torch.cuda.OutOfMemoryError(TORCH_MESSAGE)

            engine.train_minibatch = out_of_memory
        line, error = "", None
        try:
            group.execute_each("update", args).wait(timeout=600)
        except OutOfMemoryRaisedError as exc:
            line, error = str(exc), exc  # what the entry points print after "error: "
        filler.clear()
        if on_gpu:
            torch.cuda.empty_cache()
        else:
            del engine.train_minibatch
        recovered = bool(group.execute_each("update", args).wait(timeout=600)[0])
    finally:
        group.shutdown()
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
    figures = {
        "named": int(line.startswith("actor[0] on node 0 ran out of GPU memory in update() (")),
        "cause_is_torch_oom": int("CUDA out of memory" in line),
        "names_micro_batch_key": int("algorithm.training_batch_size_per_gpu=4" in line),
        "gpu_figures": int("its GPU: " in line),
        "cuda_peak": int(" GiB CUDA" in line),
        "one_line": int(bool(line) and "\n" not in line),
        "worker_recovered": int(recovered),
        "line": line or (str(error) if error else "no out-of-memory error was raised"),
    }
    rules = [("named", "==", 1), ("cause_is_torch_oom", "==", 1), ("names_micro_batch_key", "==", 1),
             ("one_line", "==", 1), ("worker_recovered", "==", 1)]
    if on_gpu:
        rules += [("gpu_figures", "==", 1), ("cuda_peak", "==", 1)]
    return outcome(figures, rules)
