"""A corpus of misconfigurations a new user makes, for both entries, every config section.

Each case: a Hydra config of ``examples/<entry>/config``, the overrides a user would type (``{x}``
names a path the test builds: ``model``, ``out``, ``file``, ...) and the key the refusal must
name. ``tests/config/test_misconfig_corpus.py`` runs them all through the pre-Ray checks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    entry: str          # math | embodied
    config: str         # config name in examples/<entry>/config
    overrides: tuple[str, ...]
    key: str            # the key the one-line refusal must name
    why: str            # what the user did

    @property
    def id(self) -> str:
        return f"{self.entry}:{self.key}:{self.why}".replace(" ", "_")


def _m(overrides, key, why, config="grpo_tiny_cpu"):
    return Case("math", config, tuple(overrides), key, why)


def _e(overrides, key, why, config="toy_ppo_mlp"):
    return Case("embodied", config, tuple(overrides), key, why)


MS = "maniskill_ppo_mlp_cpu"
VLA = "maniskill_ppo_openvlaoft_tiny_cpu"
LIBERO = "libero_grpo_openvlaoft_tiny_cpu"

CASES = [
    # ---- math: cluster
    _m(["cluster.num_nodes=2"], "cluster.num_nodes", "two nodes on a private local cluster"),
    _m(["cluster.num_nodes=0"], "cluster.num_nodes", "zero nodes"),
    _m(["cluster.accelerators_per_node=-1"], "cluster.accelerators_per_node", "negative slots"),
    _m(["~cluster.component_placement", "++cluster.component_placement={{actor: all}}"],
       "cluster.component_placement", "rollout not placed"),
    _m(["++cluster.component_placement.critic=all"], "cluster.component_placement.critic",
       "a component math runs do not have"),
    _m(["cluster=tiny_disaggregated", "cluster.component_placement.actor=0-5"],
       "cluster.component_placement.actor", "placement beyond the declared slots"),
    # ---- math: data
    _m(["data.rollout_batch_size=0"], "data.rollout_batch_size", "zero prompts per step"),
    _m(["data.val_rollout_batch_size=0"], "data.val_rollout_batch_size", "zero validation prompts"),
    _m(["data.rollout_batch_size=100000"], "data.rollout_batch_size", "more prompts than the data set"),
    _m(["data.max_prompt_length=0"], "data.max_prompt_length", "zero prompt length"),
    _m(["++data.num_workers=-1"], "data.num_workers", "negative loader workers"),
    _m(["data.train_data_paths=[{out}/nope.jsonl]"], "data.train_data_paths[0]", "missing train file"),
    _m(["data.val_data_paths=[{out}/nope.jsonl]"], "data.val_data_paths[0]", "missing val file"),
    _m(["data.train_data_paths=[{dir}]"], "data.train_data_paths[0]", "a folder as the train file"),
    _m(["data.prompt_key=question"], "data.train_data_paths", "prompt key absent from the file"),
    _m(["data.train_data_paths=[]"], "data.train_data_paths", "no train file"),
    _m(["data.apply_chat_template=true"], "data.apply_chat_template", "tokenizer without a chat template"),
    _m(["data.type=gsm8k"], "data.type", "unknown data type"),
    # ---- math: algorithm
    _m(["algorithm.group_size=0"], "algorithm.group_size", "zero responses per prompt"),
    _m(["algorithm.group_size=1"], "algorithm.group_size", "grpo without a group"),
    _m(["algorithm.n_minibatches=3"], "algorithm.n_minibatches", "minibatches not dividing the batch"),
    _m(["algorithm.training_batch_size_per_gpu=7"], "algorithm.training_batch_size_per_gpu",
       "micro-batch not dividing the minibatch"),
    _m(["algorithm.training_batch_size_per_gpu=0"], "algorithm.training_batch_size_per_gpu", "zero micro-batch"),
    _m(["algorithm.logprob_forward_micro_batch_size=0"], "algorithm.logprob_forward_micro_batch_size",
       "zero log-prob micro-batch"),
    _m(["++algorithm.rollout_batch_size_per_gpu=0"], "algorithm.rollout_batch_size_per_gpu",
       "zero per-GPU rollout batch"),
    _m(["++algorithm.val_rollout_batch_size_per_gpu=0"], "algorithm.val_rollout_batch_size_per_gpu",
       "zero per-GPU validation batch"),
    _m(["algorithm.sampling_params.temperature=0"], "algorithm.sampling_params.temperature",
       "sampling at temperature 0"),
    _m(["algorithm.sampling_params.top_p=0"], "algorithm.sampling_params.top_p", "top_p 0"),
    _m(["algorithm.sampling_params.top_p=1.5"], "algorithm.sampling_params.top_p", "top_p above 1"),
    _m(["algorithm.sampling_params.repetition_penalty=0"], "algorithm.sampling_params.repetition_penalty",
       "repetition penalty 0"),
    _m(["algorithm.sampling_params.max_new_tokens=0"], "algorithm.sampling_params.max_new_tokens",
       "no new tokens"),
    _m(["algorithm.sampling_params.max_new_tokens=500"], "algorithm.sampling_params.max_new_tokens",
       "prompt + response beyond seq_length"),
    _m(["algorithm.sampling_params.min_new_tokens=-1"], "algorithm.sampling_params.min_new_tokens",
       "negative minimum"),
    _m(["algorithm.kl_beta=-0.1"], "algorithm.kl_beta", "negative KL weight"),
    _m(["algorithm.ratio_clip_eps=0"], "algorithm.ratio_clip_eps", "zero clip range"),
    _m(["++algorithm.clip_ratio_high=-0.1"], "algorithm.clip_ratio_high", "negative upper clip"),
    _m(["++algorithm.clip_ratio_c=0.5"], "algorithm.clip_ratio_c", "dual clip below 1"),
    _m(["algorithm.early_stop_imp_ratio=0.5"], "algorithm.early_stop_imp_ratio", "early stop ratio below 1"),
    _m(["++algorithm.gamma=1.5"], "algorithm.gamma", "discount above 1"),
    _m(["++algorithm.lam=-0.1"], "algorithm.lam", "negative lambda"),
    _m(["algorithm.adv_type=gae"], "algorithm.adv_type", "gae for an LLM run without a critic"),
    _m(["algorithm.adv_type=ppo"], "algorithm.adv_type", "an estimator that does not exist"),
    _m(["algorithm.loss_type=dpo"], "algorithm.loss_type", "an unknown loss"),
    _m(["algorithm.kl_penalty_type=k9"], "algorithm.kl_penalty_type", "an unknown KL estimator"),
    _m(["++algorithm.max_head_offpolicyness=1", "algorithm.loss_type=decoupled_ppo"],
       "algorithm.max_head_offpolicyness", "async rollout on a collocated placement"),
    _m(["++algorithm.max_head_offpolicyness=-1"], "algorithm.max_head_offpolicyness", "negative staleness"),
    _m(["++algorithm.overlong_buffer_len=-8"], "algorithm.overlong_buffer_len", "negative overlong buffer"),
    _m(["++algorithm.behav_imp_weight_cap=0.5"], "algorithm.behav_imp_weight_cap", "cap below 1"),
    _m(["++algorithm.max_dynamic_sampling_rounds=-1"], "algorithm.max_dynamic_sampling_rounds",
       "negative refill rounds"),
    _m(["++algorithm.bogus=1"], "algorithm.bogus", "a typo'd key"),
    # ---- math: rollout
    _m(["++rollout.mode=disaggregate"], "rollout.mode", "mode contradicting a collocated placement"),
    _m(["rollout.model.model_path={out}/missing"], "rollout.model.model_path", "missing rollout model"),
    _m(["++rollout.gpu_memory_utilization=0"], "rollout.gpu_memory_utilization", "zero memory fraction"),
    _m(["++rollout.tensor_parallel_size=0"], "rollout.tensor_parallel_size", "zero tensor parallel"),
    _m(["++rollout.rollout_backend=vllm", "rollout.backend=sglang"], "rollout.rollout_backend",
       "two engines named"),
    _m(["rollout.backend=trt"], "rollout.backend", "an unknown engine"),
    _m(["++rollout.max_running_requests=0"], "rollout.max_running_requests", "zero running requests"),
    # ---- math: actor
    _m(["actor.model.model_path={out}/missing", "rollout.model.model_path={out}/missing"],
       "actor.model.model_path", "missing model folder"),
    _m(["actor.model.model_path={config_only}", "rollout.model.model_path={config_only}"],
       "actor.model.model_path", "model folder with only config.json"),
    _m(["actor.model.model_path={no_tokenizer}", "rollout.model.model_path={no_tokenizer}"],
       "actor.model.model_path", "model folder without tokenizer files"),
    _m(["actor.model.model_path={missing_shard}", "rollout.model.model_path={missing_shard}"],
       "actor.model.model_path", "sharded model with a shard missing"),
    _m(["actor.model.model_path={file}", "rollout.model.model_path={file}"], "actor.model.model_path",
       "a file as the model folder"),
    _m(["++actor.tokenizer.tokenizer_model={out}/no_tokenizer_here"], "actor.tokenizer.tokenizer_model",
       "missing tokenizer folder"),
    _m(["actor.optim.lr=0"], "actor.optim.lr", "zero learning rate"),
    _m(["++actor.optim.weight_decay=-0.01"], "actor.optim.weight_decay", "negative weight decay"),
    _m(["actor.optim.adam_beta2=1.0"], "actor.optim.adam_beta2", "beta2 of 1"),
    _m(["++actor.optim.adam_eps=0"], "actor.optim.adam_eps", "zero epsilon"),
    _m(["actor.optim.clip_grad=-1"], "actor.optim.clip_grad", "negative clip"),
    _m(["++actor.optim.min_lr=1.0"], "actor.optim.min_lr", "min_lr above lr"),
    _m(["++actor.optim.bf16=true", "++actor.optim.fp16=true"], "actor.optim.fp16", "two half precisions"),
    _m(["++actor.fsdp_config.fsdp_size=3"], "actor.fsdp_config.fsdp_size", "fsdp_size not dividing the ranks"),
    _m(["++actor.fsdp_config.fsdp_size=0"], "actor.fsdp_config.fsdp_size", "zero fsdp_size"),
    _m(["actor.fsdp_config.strategy=deepspeed"], "actor.fsdp_config.strategy", "another framework's strategy"),
    _m(["++actor.lr_sched.lr_warmup_fraction=1.5"], "actor.lr_sched.lr_warmup_fraction", "warm-up beyond the run"),
    _m(["++actor.lr_sched.lr_warmup_iters=-1"], "actor.lr_sched.lr_warmup_iters", "negative warm-up"),
    _m(["++actor.lr_sched.lr_decay_style=exponential"], "actor.lr_sched.lr_decay_style", "unknown decay"),
    _m(["actor.model.precision=fp8"], "actor.model.precision", "unknown precision"),
    _m(["++actor.training_backend=deepspeed"], "actor.training_backend", "unknown backend"),
    _m(["++actor.fsdp_config.grad_scaler.init_scale=0"], "actor.fsdp_config.grad_scaler.init_scale",
       "zero loss scale"),
    # ---- math: reward / critic
    _m(["reward.reward_scale=0"], "reward.reward_scale", "zero reward scale"),
    _m(["++reward.verify_timeout_s=0"], "reward.verify_timeout_s", "zero verify timeout"),
    _m(["reward.verify_processes=0"], "reward.verify_processes", "zero verifier processes"),
    _m(["++reward.use_reward_model=true"], "reward.use_reward_model", "a reward model"),
    _m(["++critic.use_critic_model=true"], "critic.use_critic_model", "a critic for an LLM run"),
    _m(["++critic.value_clip=-0.2"], "critic.value_clip", "negative value clip"),
    # ---- math: runner
    _m(["runner.seq_length=1"], "runner.seq_length", "sequence length 1"),
    _m(["runner.max_steps=0"], "runner.max_steps", "zero steps"),
    _m(["runner.max_epochs=0"], "runner.max_epochs", "zero epochs"),
    _m(["runner.val_check_interval=0"], "runner.val_check_interval", "validate every 0 steps"),
    _m(["runner.save_interval=0"], "runner.save_interval", "save every 0 steps"),
    _m(["runner.resume_dir={out}/nope"], "runner.resume_dir", "resume from a missing folder"),
    _m(["runner.resume_dir={empty}"], "runner.resume_dir", "resume from a folder without checkpoints"),
    _m(["runner.resume_dir={corrupt}"], "runner.resume_dir", "resume from a corrupt trainer_state.json"),
    _m(["runner.resume_dir={no_actor}"], "runner.resume_dir", "resume from a checkpoint without actor state"),
    _m(["runner.output_dir={file}"], "runner.output_dir", "output dir that is a file"),
    _m(["runner.logger.log_path={file}/logs"], "runner.logger.log_path", "log path under a file"),
    _m(["runner.logger.logger_backends=[mlflow]"], "runner.logger.logger_backends[0]", "unknown logger"),
    _m(["runner.task_type=embodied"], "runner.task_type", "embodied task in the math entry"),
    _m(["++runner.max_tokens_per_mbs=0"], "runner.max_tokens_per_mbs", "zero token budget"),
    _m(["++runner.bogus=1"], "runner.bogus", "a typo'd runner key"),
    # ---- embodied: cluster / runner
    _e(["cluster.num_nodes=3"], "cluster.num_nodes", "three nodes on a private local cluster"),
    _e(["~cluster.component_placement.env"], "cluster.component_placement", "env not placed"),
    _e(["++cluster.component_placement.reward=0"], "cluster.component_placement.reward",
       "a component embodied runs do not have"),
    _e(["cluster.component_placement.rollout=0-1", "cluster.component_placement.env=0"],
       "cluster.component_placement.rollout", "more rollout than env processes"),
    _e(["runner.task_type=math"], "runner.task_type", "math task in the embodied entry"),
    _e(["runner.output_dir={file}"], "runner.output_dir", "output dir that is a file"),
    _e(["++runner.resume_dir={corrupt}"], "runner.resume_dir", "resume from a corrupt trainer_state.json"),
    _e(["++runner.resume_dir={empty}"], "runner.resume_dir", "resume from a folder without checkpoints"),
    _e(["++env.eval.video_cfg.save_video=true", "++env.eval.video_cfg.video_base_dir={file}"],
       "env.eval.video_cfg.video_base_dir", "video folder that is a file"),
    # ---- embodied: env
    _e(["env.train.total_num_envs=0"], "env.train.total_num_envs", "zero envs"),
    _e(["env.train.total_num_envs=15"], "env.train.total_num_envs", "envs not splitting over stages"),
    _e(["env.train.env_type=mujoco"], "env.train.env_type", "unknown simulator"),
    _e(["env.eval.max_episode_steps=0"], "env.eval.max_episode_steps", "zero-step episodes"),
    _e(["++env.train.sim_in_worker=true"], "env.train.sim_in_worker", "in-worker sims for toy"),
    _e(["++env.train.group_size=0"], "env.train.group_size", "zero group"),
    _e(["++env.train.video_cfg.fps=0"], "env.train.video_cfg.fps", "zero fps"),
    _e(["env.train.init_params.id=PushCube-v99"], "env.train.init_params.id", "unknown ManiSkill task", MS),
    _e(["env.eval.init_params.id=PushCub-v1"], "env.eval.init_params.id", "misspelt ManiSkill task", MS),
    _e(["env.train.init_params.control_mode=pd_warp_drive"], "env.train.init_params.control_mode",
       "unknown control mode", MS),
    _e(["++env.train.init_params.obs_mode=smell"], "env.train.init_params.obs_mode", "unknown obs mode", MS),
    _e(["++env.train.envs_per_process=2"], "env.train.envs_per_process", "processes with in-worker sims", MS),
    # ---- embodied: actor / policy
    _e(["actor.model.action_dim=3"], "actor.model.action_dim", "action_dim not matching toy", ),
    _e(["actor.model.action_dim=7"], "actor.model.action_dim", "ee action size with joint control", MS),
    _e(["actor.model.model_type=transformer_xl"], "actor.model.model_type", "unknown policy type"),
    _e(["actor.model.model_type=cnn"], "actor.model.model_type", "cnn policy on state observations"),
    _e(["actor.model.num_action_chunks=0"], "actor.model.num_action_chunks", "zero chunks"),
    _e(["actor.model.policy_hidden_sizes=[64,0]"], "actor.model.policy_hidden_sizes[1]", "zero-width layer"),
    _e(["++actor.model.model_path={out}/nope"], "actor.model.model_path", "missing saved policy"),
    _e(["++actor.model.is_lora=true"], "actor.model.is_lora", "LoRA on an MLP"),
    _e(["actor.micro_batch_size=0"], "actor.micro_batch_size", "zero micro-batch"),
    _e(["actor.global_batch_size=7"], "actor.global_batch_size", "global batch not dividing the samples"),
    _e(["actor.micro_batch_size=48"], "actor.micro_batch_size", "micro-batch not dividing the global batch"),
    _e(["actor.optim.lr=-1"], "actor.optim.lr", "negative learning rate"),
    _e(["actor.training_backend=megatron"], "actor.training_backend", "Megatron for an embodied policy"),
    _e(["++actor.fsdp_config.fsdp_size=3"], "actor.fsdp_config.fsdp_size", "fsdp_size not dividing the ranks"),
    _e(["actor.model.model_path={out}/nope"], "actor.model.model_path", "missing VLA checkpoint", VLA),
    _e(["actor.model.model_path={config_only}"], "actor.model.model_path", "VLA folder with only config.json", VLA),
    _e(["actor.model.unnorm_key=bridge_orig"], "actor.model.unnorm_key", "statistics the VLA lacks", VLA),
    _e(["actor.model.lora_path={out}/nope"], "actor.model.lora_path", "missing LoRA adapter", VLA),
    _e(["actor.model.lora_rank=8"], "actor.model.lora_rank", "rank differing from the adapter", VLA),
    _e(["actor.model.action_dim=8"], "actor.model.action_dim", "VLA action size not matching the env", VLA),
    _e(["actor.model.action_dim=6"], "actor.model.action_dim", "VLA action size not matching LIBERO", LIBERO),
    _e(["env.train.task_suite_name=libero_100"], "env.train.task_suite_name", "unknown LIBERO suite", LIBERO),
    _e(["env.train.task_ids=[99]"], "env.train.task_ids[0]", "LIBERO task id beyond the suite", LIBERO),
    # ---- embodied: algorithm / rollout / critic
    _e(["critic.use_critic_model=false"], "critic.use_critic_model", "gae without a value head"),
    _e(["++algorithm.kl_beta=0.1"], "algorithm.kl_beta", "KL without a reference policy"),
    _e(["algorithm.update_epochs=0"], "algorithm.update_epochs", "zero update epochs"),
    _e(["algorithm.rollout_epoch=0"], "algorithm.rollout_epoch", "zero rollout epochs"),
    _e(["++algorithm.target_kl=0"], "algorithm.target_kl", "zero target KL"),
    _e(["algorithm.value_loss_coef=-1"], "algorithm.value_loss_coef", "negative value weight"),
    _e(["algorithm.adv_type=reinpp"], "algorithm.adv_type", "an LLM-only estimator"),
    _e(["algorithm.adv_type=grpo", "++algorithm.group_size=2", "++env.train.group_size=2"],
       "env.train.use_fixed_reset_state_ids", "grpo from random start states"),
    _e(["++algorithm.max_head_offpolicyness=2"], "algorithm.max_head_offpolicyness", "two versions ahead"),
    _e(["++algorithm.max_head_offpolicyness=1", "algorithm.rollout_epoch=2"], "algorithm.rollout_epoch",
       "several rollout epochs running ahead"),
    _e(["++algorithm.max_head_offpolicyness=1"], "env.enable_offload", "overlap with offloaded envs", VLA),
    _e(["++algorithm.auto_reset=true"], "algorithm.auto_reset", "episode rule no env split inherits", LIBERO),
    _m(["++algorithm.ignore_terminations=true"], "algorithm.ignore_terminations", "an embodied key in a math run"),
    _e(["algorithm.reward_type=step_level"], "algorithm.reward_type", "unknown reward granularity"),
    _e(["rollout.pipeline_stage_num=0"], "rollout.pipeline_stage_num", "zero stages"),
    _e(["rollout.pipeline_stage_num=3"], "env.train.total_num_envs", "envs not splitting over three stages"),
    _e(["++rollout.mode=collocate"], "rollout.mode", "mode contradicting a disaggregated placement"),
    _e(["rollout.backend=vllm"], "rollout.backend", "vLLM serving an MLP policy"),
    _e(["++rollout.state_norm_clip=0"], "rollout.state_norm_clip", "zero clip of normalised states"),
    _e(["++critic.value_clip=0"], "critic.value_clip", "zero value clip"),
]
