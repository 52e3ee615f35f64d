"""Algorithm glue that needs config: from ``algorithm:`` settings to advantages, losses and the
way a step's batch is cut for the update. Sits between ``rlinf.algorithms`` (pure functions) and
``rlinf.workers`` (which run it); runners use it too, so they never import from a worker module.

* :mod:`rlinf.objectives.llm`: ``add_advantages``, ``shape_rewards``, ``make_loss_fn`` (LLM RL).
* :mod:`rlinf.objectives.embodied`: the embodied PPO / GRPO loss (``embodied_ppo_loss``).
* :mod:`rlinf.objectives.batching`: ``plan_update`` (shards and minibatch token counts),
  ``micro_batches`` (fixed size or packed by tokens).
"""
