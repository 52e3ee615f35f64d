"""AReaL's allocation strings -> which accelerators each rlinf component gets, its backend and its
parallel sizes.

Accepted forms (as AReaL documents them; read for the grammar, nothing copied):

* legacy, AReaL's ``allocation_mode`` of seed 002 and its older example configs: an inference
  backend, a dot, its dimensions, ``+``, the training dimensions: ``sglang.d4p1t1+d4p1t1``,
  ``vllm.d2t2+d4``;
* ``<backend>:<dims>`` components (AReaL ``docs/reference/alloc_mode.md``): ``sglang:d2t4+fsdp:d4t2``,
  ``vllm:d4+megatron:d2p2t1``; a training component without a backend picks FSDP, or Megatron when
  ``p`` or ``e`` is above 1 (``d4t2``, ``d2p2t4``);
* ``+`` separates components on separate accelerators (disaggregated), ``|`` puts the components
  it joins on the same ones (colocated): ``sglang:d4|fsdp:d4``;
* named components, ``backend[name]:dims`` (or ``backend(name):dims``), e.g. AReaL's colocated
  example ``sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1`` and ``sglang[r]:d2+fsdp[a]:d4|fsdp[c]:d4``;
  inference components are our rollout, training ones named actor/a (or unnamed) our actor,
  critic/c our critic, ref our inference group;
* a training component alone (``d8``, ``fsdp:d8``) is one backend on every accelerator: actor and
  rollout colocated;
* the newest per-engine fields (AReaL ``docs/en/reference/alloc_mode.md``): ``rollout.backend:
  "sglang:d4t2"``, ``actor.backend: "fsdp:d8"`` — each one component string; ``scheduling_strategy:
  {type: colocation, target: actor}`` puts an engine on its target's accelerators;
* ``+eval`` / ``+cpu`` (a separate evaluation server) is read and has no counterpart.

Refused with one line: the MoE ``(attn:...|ffn:...)`` form, unknown backends or dimensions, a
dimension given twice, several inference components.

Dimensions: ``d`` data, ``t`` tensor, ``p`` pipeline, ``c`` context, ``e`` expert parallel; a
component's accelerators are d x t x p x c (``e`` reshapes the same mesh).

Example:
    >>> [str(a) for a in parse_allocation("sglang.d4p1t1+d4p1t1")]
    ['sglang:d4p1t1', 'fsdp:d4p1t1']
    >>> layout = lay_out(parse_allocation("vllm:d2t2+d4"))
    >>> {c: (p.gpus, p.per_process) for c, p in layout.items()}
    {'rollout': ([0, 1, 2, 3], 2), 'actor': ([4, 5, 6, 7], 1)}
    >>> parse_allocation("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    Traceback (most recent call last):
    ...
    rlinf.config.translate.allocation.AllocationError: the MoE form (attn:...|ffn:...) has no counterpart: rlinf's Megatron actor has one parallel layout for every layer
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import re
from dataclasses import dataclass, field

INFERENCE_BACKENDS = ("sglang", "vllm")
TRAINING_BACKENDS = ("fsdp", "megatron", "archon")
_COMPONENT = re.compile(r"^(?:(?P<backend>[a-z]+)(?:\[(?P<n1>\w+)\]|\((?P<n2>\w+)\))?(?P<sep>[:.])|"
                        r"\[(?P<n3>\w+)\]:)?(?P<dims>(?:[a-z]\d+)+)$")
_DIM = re.compile(r"([a-z])(\d+)")
#: names of training components -> our components
TRAINING_NAMES = {"actor": "actor", "a": "actor", "train": "actor", "critic": "critic", "c": "critic",
                  "ref": "inference", "reference": "inference"}


class AllocationError(ValueError):
    """An allocation string we cannot read (the message is one line)."""


@dataclass
class Allocation:
    """One component of an allocation string."""

    backend: str
    name: str | None
    dims: dict[str, int]
    colocated_with: int | None = None  # index of the component whose accelerators it shares

    @property
    def inference(self) -> bool:
        return self.backend in INFERENCE_BACKENDS

    @property
    def world(self) -> int:
        """Accelerators the component uses (d x t x p x c)."""
        return self.dim("d") * self.dim("t") * self.dim("p") * self.dim("c")

    def dim(self, key: str) -> int:
        return self.dims.get(key, 1)

    def __str__(self) -> str:
        return f"{self.backend}:" + "".join(f"{k}{v}" for k, v in self.dims.items())


@dataclass
class Placed:
    """Where one of our components runs: accelerator ranks, accelerators per process, and the
    allocation it came from."""

    gpus: list[int]
    per_process: int
    source: Allocation = field(repr=False)


def parse_component(text: str) -> Allocation:
    """One ``backend[name]:dims`` component (``sglang.d4t1``, ``fsdp[actor]:d4``, ``d2p2t4``).

    >>> parse_component("d2p2t4"), parse_component("vllm[gen]:d2t2").name
    (Allocation(backend='megatron', name=None, dims={'d': 2, 'p': 2, 't': 4}, colocated_with=None), 'gen')
    """
    m = _COMPONENT.match(text)
    if not m:
        raise AllocationError(f"cannot read component {text!r}; expected e.g. sglang:d4t2, fsdp:d8, d4p1t1")
    backend, sep = m.group("backend"), m.group("sep")
    name = m.group("n1") or m.group("n2") or m.group("n3")
    dims: dict[str, int] = {}
    for key, size in _DIM.findall(m.group("dims")):
        if key in dims:
            raise AllocationError(f"component {text!r} gives dimension {key!r} twice")
        if key not in "dtpce" or int(size) < 1:
            raise AllocationError(f"component {text!r}: {key}{size} is not a dimension (d, t, p, c, e >= 1)")
        dims[key] = int(size)
    if backend is None:
        backend = "megatron" if dims.get("p", 1) > 1 or dims.get("e", 1) > 1 else "fsdp"
    elif backend not in INFERENCE_BACKENDS + TRAINING_BACKENDS:
        raise AllocationError(f"unknown backend {backend!r} in {text!r}; AReaL's are "
                              f"{', '.join(INFERENCE_BACKENDS + TRAINING_BACKENDS)}")
    if sep == "." and backend not in INFERENCE_BACKENDS:
        raise AllocationError(f"{text!r}: the legacy '.' form is for inference backends (sglang.d4t1)")
    if backend in INFERENCE_BACKENDS and set(dims) - set("dtp"):
        raise AllocationError(f"{text!r}: inference components take only d, t and p")
    return Allocation(backend, name, dims)


def parse_allocation(text: str) -> list[Allocation]:
    """All components of an allocation string, in order (see the module docstring)."""
    text = re.sub(r"\s+", "", str(text))
    if not text:
        raise AllocationError("empty allocation string")
    if "attn:" in text or "ffn:" in text:
        raise AllocationError("the MoE form (attn:...|ffn:...) has no counterpart: rlinf's Megatron actor "
                              "has one parallel layout for every layer")
    allocations: list[Allocation] = []
    for part in text.split("+"):
        if part in ("eval", "cpu"):
            continue
        anchor = len(allocations)
        for i, piece in enumerate(part.split("|")):
            allocation = parse_component(piece)
            allocation.colocated_with = anchor if i else None
            allocations.append(allocation)
    if sum(a.inference for a in allocations) > 1:
        raise AllocationError(f"{text!r} has several inference components; rlinf runs one rollout group")
    return allocations


def component_of(allocation: Allocation, taken: set[str]) -> str:
    """Our component for an allocation: inference -> rollout, training -> actor / critic /
    inference (by its name; an unnamed one is the actor, then the critic)."""
    if allocation.inference:
        return "rollout"
    if allocation.name is None:
        return "actor" if "actor" not in taken else "critic"
    ours = TRAINING_NAMES.get(allocation.name.lower())
    if ours is None:
        raise AllocationError(f"component name {allocation.name!r}: expected one of {', '.join(TRAINING_NAMES)}")
    return ours


def lay_out(allocations: list[Allocation]) -> dict[str, Placed]:
    """Our components -> accelerators: components joined by ``+`` take consecutive ranges in the
    order written (rollout first in AReaL's strings), ``|`` shares the first one's range.
    A single training component is colocated with the rollout; processes: one per accelerator for
    training, one per t x p accelerators for inference."""
    placed: dict[str, Placed] = {}
    ranges: list[list[int]] = []
    start = 0
    for allocation in allocations:
        if allocation.colocated_with is not None:
            gpus = ranges[allocation.colocated_with]
            if allocation.world != len(gpus):
                raise AllocationError(f"{allocation} is colocated with {allocations[allocation.colocated_with]} "
                                      f"but uses {allocation.world} accelerators, not {len(gpus)}")
        else:
            gpus = list(range(start, start + allocation.world))
            start += allocation.world
        ranges.append(gpus)
        name = component_of(allocation, set(placed))
        if name in placed:
            raise AllocationError(f"two components map to our {name} ({placed[name].source} and {allocation})")
        per_process = allocation.dim("t") * allocation.dim("p") if allocation.inference else 1
        placed[name] = Placed(gpus, per_process, allocation)
    if "actor" in placed and "rollout" not in placed:
        actor = placed["actor"]
        placed["rollout"] = Placed(actor.gpus, 1, actor.source)
    return placed
