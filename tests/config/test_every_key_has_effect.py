"""Every key the typed config accepts has its effect or is refused (the house rule).

The test walks every field under ``MathConfig``, ``EmbodiedConfig``, ``OffPolicyEmbodiedConfig``,
``WebAgentConfig`` and ``ToolAgentConfig``. A field must be one of:

* scoped to the other kind of run (``rule(scope=...)``): setting it there is refused with the key
  named (task scopes) or named in a start-up note (the idle training backend's keys);
* restricted (``rule(only=...)``): a value outside the accepted ones is refused, naming the key;
* noted (``rule(note=...)``): the value is accepted and the start-up notes name the key;
* read: the attribute (or its name as a string for ``getattr`` loops) appears in the code outside
  the config package's ``validate`` methods and the doc renderer, and for names several sections
  share, in the consumer this test lists.

A new field that is none of these fails here, so the list of accepted-but-ignored keys cannot grow.
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest

from rlinf.config.agent import ToolAgentConfig
from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig
from rlinf.config.math import MathConfig
from rlinf.config.web import WebAgentConfig
from rlinf.utils.typed_config import ConfigError, field_default

ROOT = Path(__file__).resolve().parents[2]
TASK_SCOPES = {"math", "embodied", "offpolicy"}

MATH_BASE = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                         "component_placement": {"actor,rollout": "all"}},
             "data": {"train_data_paths": ["x.jsonl"], "rollout_batch_size": 2},
             "algorithm": {"group_size": 2}, "actor": {"model": {"model_path": "m"}}}
EMBODIED_BASE = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                             "component_placement": {"env,rollout,actor": "all"}},
                 "runner": {"task_type": "embodied"}, "algorithm": {"adv_type": "gae"},
                 "critic": {"use_critic_model": True},
                 "env": {"train": {"env_type": "toy", "total_num_envs": 4},
                         "eval": {"env_type": "toy", "total_num_envs": 4}},
                 "actor": {"model": {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 1},
                           "micro_batch_size": 4, "global_batch_size": 8}}
OFFPOLICY_BASE = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                              "component_placement": {"env,rollout,actor": "all"}},
                  "runner": {"task_type": "embodied"}, "algorithm": {"loss_type": "embodied_sac"},
                  "env": {"train": {"env_type": "toy", "total_num_envs": 4, "auto_reset": True},
                          "eval": {"env_type": "toy", "total_num_envs": 4}},
                  "actor": {"model": {"model_type": "sac_mlp", "action_dim": 2}, "global_batch_size": 8}}
WEB_BASE = {"save_path": "r", "policy_config": {"base_model": "m"},
            "cluster": {"num_nodes": 1, "accelerators_per_node": 1,
                        "component_placement": {"env": 0, "rollout": 0, "actor": 0}},
            "env_config": {"test_tasks_rollout_size": 2, "test_tasks_repeat_times": 1}}
TOOL_BASE = {**MATH_BASE, "runner": {"task_type": "tool_agent"}, "tools": {"calculator": {}}}
ROOTS = {"math": (MathConfig, MATH_BASE), "embodied": (EmbodiedConfig, EMBODIED_BASE),
         "offpolicy": (OffPolicyEmbodiedConfig, OFFPOLICY_BASE),
         "web": (WebAgentConfig, WEB_BASE), "tool_agent": (ToolAgentConfig, TOOL_BASE)}

#: names several sections share (or that other objects have too): the file that reads each
#: path, and a snippet of that read, so "read somewhere" means read for this key
CONSUMERS = {
    "actor.group_name": ("rlinf/runners/math/groups.py", "cfg.actor.group_name"),
    "rollout.group_name": ("rlinf/runners/math/groups.py", "cfg.rollout.group_name"),
    "reward.group_name": ("rlinf/runners/math/groups.py", "cfg.reward.group_name"),
    "inference.group_name": ("rlinf/runners/math/groups.py", "cfg.inference.group_name"),
    "critic.group_name": ("rlinf/runners/math/groups.py", "cfg.critic.group_name"),
    "env.group_name": ("rlinf/runners/embodied/loop.py", "cfg.env.group_name"),
    "rollout.channel.name": ("rlinf/runners/math/pipeline.py", "ch.name"),
    "rollout.channel.queue_name": ("rlinf/runners/math/pipeline.py", "channel.queue_name"),
    "rollout.channel.queue_size": ("rlinf/runners/math/pipeline.py", "maxsize=ch.queue_size"),
    "env.channel.name": ("rlinf/runners/embodied/recipe.py", "env.name"),
    "actor.channel.name": ("rlinf/runners/embodied/recipe.py", "act.name"),
    "rollout.model.model_type": ("rlinf/runners/math/preflight.py", "cfg.rollout.model.model_type"),
    "inference.model.model_type": ("rlinf/runners/math/preflight.py", "cfg.inference.model.model_type"),
    "actor.optim.optimizer": ("rlinf/engines/training/common.py", "optim_cfg.optimizer"),
    "data.num_workers": ("rlinf/runners/math/preflight.py", "num_workers=d.num_workers"),
    "data.validation_shuffle": ("rlinf/runners/math/preflight.py", "shuffle=d.validation_shuffle"),
    "runner.max_prompt_length": ("rlinf/runners/embodied/loop.py", "cfg.runner.max_prompt_length"),
    # every recipe's resume checks (the web recipe's: rlinf/runners/web_agent/preflight.py)
    "runner.resume_unverified": ("rlinf/runners/preflight.py", "resume_unverified=runner.resume_unverified"),
    "runner.deterministic": ("rlinf/runners/embodied_offpolicy/loop.py", "cfg.runner.deterministic"),
    "rollout.enable_offload": ("rlinf/runners/math/pipeline.py", "cfg.rollout.enable_offload"),
    "actor.model.low_cpu_mem_usage": ("rlinf/engines/training/fsdp.py", "cfg.model.low_cpu_mem_usage"),
    "actor.model.val_micro_batch_size": ("rlinf/workers/rollout/policy_worker.py", "model.val_micro_batch_size"),
    "env.eval.num_episodes": ("rlinf/config/env.py", "self.num_episodes if self.num_episodes is not None"),
    "actor.tokenizer.use_fast": ("rlinf/data/tokenizer.py", "settings.use_fast"),
    "actor.calculate_flops": ("rlinf/workers/actor/fsdp_actor.py", "actor.calculate_flops"),
    "algorithm.use_valid_token_scale": ("rlinf/workers/actor/fsdp_actor.py", "algorithm.use_valid_token_scale"),
    "algorithm.val_rollout_batch_size_per_gpu": ("rlinf/runners/math/loop.py", "val_rollout_batch_size_per_gpu"),
    "rollout.detokenize": ("rlinf/workers/rollout/generation_worker.py", "self.cfg.detokenize"),
    "rollout.print_outputs": ("rlinf/workers/rollout/generation_worker.py", "self.cfg.print_outputs"),
    "rollout.validate_weight": ("rlinf/workers/rollout/generation_worker.py", "self.cfg.validate_weight"),
    "rollout.validate_save_dir": ("rlinf/workers/rollout/generation_worker.py", "self.cfg.validate_save_dir"),
    "actor.fsdp_config.mixed_precision.buffer_dtype": ("rlinf/engines/training/fsdp_setup.py", "mp.buffer_dtype"),
    "actor.fsdp_config.forward_prefetch": ("rlinf/engines/training/fsdp_setup.py", "fc.forward_prefetch"),
    "actor.fsdp_config.backward_prefetch": ("rlinf/engines/training/fsdp_setup.py", "fc.backward_prefetch"),
    # issue 45: the fully_async keys (math and tool agent; embodied runs refuse them by scope)
    "rollout.max_concurrent_rollouts": ("rlinf/runners/math/fully_async.py", "cfg.max_concurrent_rollouts"),
    "rollout.pause_grace_period": ("rlinf/workers/rollout/generation_worker.py", "cfg.pause_grace_period"),
    "rollout.partial_rollout": ("rlinf/workers/rollout/generation_worker.py", "self.cfg.partial_rollout"),
    # one path, two meanings: a task-qualified entry ("<task>:<path>") wins over the plain one
    "math:runner.rollout_mode": ("rlinf/runners/math/loop.py", 'cfg.rollout_mode == "fully_async"'),
    "tool_agent:runner.rollout_mode": ("rlinf/runners/math/loop.py", 'cfg.rollout_mode == "fully_async"'),
    "offpolicy:runner.rollout_mode": ("rlinf/runners/embodied_offpolicy/loop.py",
                                      'cfg.runner.rollout_mode == "async"'),
}


#: keys whose only effect in the base config of a kind of run is a cross-key check that refuses
#: other values (e.g. token budgets of a policy that has no tokens); each is tried here
REFUSED_BY_CHECKS = {
    ("math", "critic.use_critic_model"),
    ("embodied", "critic.use_critic_model"),
    ("embodied", "algorithm.length_params.max_new_token"), ("embodied", "algorithm.length_params.max_length"),
    ("embodied", "algorithm.length_params.min_length"),
    ("embodied", "env.train.num_episodes"), ("offpolicy", "env.train.num_episodes"),  # evaluation episodes only
}


def _reads() -> set[str]:
    """Attribute names read (and string constants) in rlinf/, outside config ``validate`` methods
    and the reference renderer."""
    names: set[str] = set()
    for path in (ROOT / "rlinf").rglob("*.py"):
        if path.name == "reference_doc.py":
            continue
        in_config = path.parent.name == "config"

        class Visitor(ast.NodeVisitor):
            def visit_FunctionDef(self, node):
                if in_config and node.name in (  # noqa: B023 - called within the iteration
                        "validate", "check_against_plan", "check_token_budgets", "check_rollout_mode"):
                    return
                self.generic_visit(node)

            def visit_Attribute(self, node):
                names.add(node.attr)
                self.generic_visit(node)

            def visit_Constant(self, node):
                if isinstance(node.value, str):
                    names.add(node.value)

        Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


READS = _reads()


def _leaves(cls: type, path: str = "", scope: str | None = None):
    """``(path, field, type, scope)``; a field under a scoped section inherits its scope."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        own = f.metadata.get("scope", scope)
        if f.metadata.get("flat"):  # its keys are written in the parent's mapping
            yield from _leaves(tp, path, own)
            continue
        sub = f"{path}.{f.name}" if path else f.name
        yield sub, f, tp, own
        if dataclasses.is_dataclass(tp):
            yield from _leaves(tp, sub, own)


def _other_value(tp: Any, default: Any) -> Any:
    """A value of type ``tp`` that differs from ``default`` (and passes the usual range checks)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, __import__("types").UnionType):
        rest = [a for a in args if a is not type(None)]
        if dataclasses.is_dataclass(rest[0]):
            return {}  # an optional section given (all defaults) instead of null
        return _other_value(rest[0], None if default is None else default)
    if origin is Literal:
        return next(a for a in args if a != default)
    if tp is bool:
        return not default
    if tp is int:
        return 3 if default in (None, 0, 1, 2) else default + 1
    if tp is float:
        if default is None:
            return 3.0
        return 0.5 if default in (0.0, 1.0) or default > 1 else default / 2
    if tp is str:
        return "something_else"
    if origin in (tuple, list):
        return [_other_value(args[0], None) if args and args[0] is not Ellipsis else 3]
    if origin is dict:
        return {"model": "something_else"}
    raise TypeError(tp)


def _set(raw: dict, path: str, value: Any) -> dict:
    out = __import__("copy").deepcopy(raw)
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return out


def _get(raw: dict, path: str, default: Any) -> Any:
    node: Any = raw
    for k in path.split("."):
        if not isinstance(node, dict) or k not in node:
            return default
        node = node[k]
    return node


def _parse(task: str, raw: dict):
    cls, _ = ROOTS[task]
    return cls.from_dict(raw, check_paths=False) if task in ("math", "web", "tool_agent") else cls.from_dict(raw)


def _cases():
    for task, (cls, _) in ROOTS.items():
        for path, f, tp, scope in _leaves(cls):
            yield pytest.param(task, path, f, tp, scope, id=f"{task}:{path}")


def test_base_configs_parse():
    for task, (_, raw) in ROOTS.items():
        assert _parse(task, raw).notes() == []


@pytest.mark.parametrize("task,path,f,tp,scope", list(_cases()))
def test_key_has_effect_or_is_refused(task, path, f, tp, scope):
    md = f.metadata
    _, base = ROOTS[task]
    default = _get(base, path, field_default(f))
    if typing.get_origin(tp) is Literal and len(typing.get_args(tp)) == 1:  # the type admits one value
        with pytest.raises(ConfigError) as err:
            _parse(task, _set(base, path, "something_else"))
        assert err.value.key == path
        return
    if scope is not None and scope not in _parse(task, base).active_scopes:
        if dataclasses.is_dataclass(tp):
            return  # its leaves carry the check
        value = _other_value(tp, default)
        if scope in TASK_SCOPES:
            with pytest.raises(ConfigError) as err:
                _parse(task, _set(base, path, value))
            assert err.value.key == path, f"{path}: refusal names {err.value.key}"
            assert "read by" in str(err.value)
        else:  # the idle training backend's keys are named in a start-up note
            notes = _parse(task, _set(base, path, value)).notes()
            assert any(n.startswith(f"{path}:") and "not read" in n for n in notes), notes
        return
    if "only" in md:
        allowed = md["only"]
        literal = [a for a in typing.get_args(tp) if typing.get_origin(tp) is Literal and a not in allowed]
        value = literal[0] if literal else _other_value(tp, allowed[0])
        assert value not in allowed
        with pytest.raises(ConfigError) as err:
            _parse(task, _set(base, path, value))
        assert err.value.key == path and "is refused" in str(err.value), str(err.value)
        return
    if "note" in md:
        value = md["note"][0][0]
        notes = _parse(task, _set(base, path, value)).notes()
        assert any(n.startswith(f"{path}:") for n in notes), notes
        return
    if dataclasses.is_dataclass(tp):
        return
    if (task, path) in REFUSED_BY_CHECKS:
        with pytest.raises(ConfigError) as err:
            _parse(task, _set(base, path, _other_value(tp, default)))
        assert err.value.key == path, str(err.value)
        return
    assert f.name in READS, f"{path}: accepted, read nowhere and not refused"
    consumer = CONSUMERS.get(f"{task}:{path}", CONSUMERS.get(path))
    if consumer is not None:
        file, snippet = consumer
        assert snippet in (ROOT / file).read_text(encoding="utf-8"), f"{path}: {file} no longer reads it"


def test_shared_names_have_a_listed_consumer():
    """A field name that several sections share, read in neither's scope checks, must say where
    each path is read (CONSUMERS), else the static scan could be fooled by the other section."""
    owners: dict[str, list[str]] = {}
    for _task, (cls, _) in ROOTS.items():
        for path, f, tp, _ in _leaves(cls):
            if not dataclasses.is_dataclass(tp) and not f.metadata:
                owners.setdefault(f.name, []).append(path)
    for name in ("group_name", "queue_name", "queue_size"):
        for path in set(owners.get(name, [])):
            if path not in ("rollout.channel.queue_name", "rollout.channel.queue_size",
                            "env.channel.queue_name", "env.channel.queue_size",
                            "actor.channel.queue_name", "actor.channel.queue_size"):
                assert path in CONSUMERS, f"{path} shares its name with other keys: list its consumer"
