"""The pieces of an OpenVLA model around the language model, under the checkpoint's own names.

* :class:`VisionBackbone` (``vision_backbone``): ``featurizer`` (+ ``fused_featurizer``), each a
  transformers tower from :mod:`.vision`; features of both towers are concatenated per patch
  (``[featurizer, fused_featurizer]``), images one after another (main camera, then wrist).
* :class:`Projector` (``projector``): ``arch_specifier`` ``*fused-gelu-mlp`` =
  ``fc1 -> GELU -> fc2 -> GELU -> fc3`` (``fc1`` is ``[4 V, V]`` for vision width ``V``),
  ``*gelu-mlp`` = ``fc1 -> GELU -> fc2``, ``linear`` = ``projector`` alone.
* :class:`ProprioProjector` (OFT, ``proprio_projector``): ``fc1 -> GELU -> fc2``.
* :class:`ValueHead` (RLinf's actor-critic, ``value_head``): ``mlp`` = Linear(H, 512) - GELU -
  Linear(512, 128) - GELU - Linear(128, out, no bias); last layer N(0, 0.02), the others Kaiming
  (fan-out), biases zero.

Example:
    >>> import torch
    >>> Projector("no-align+fused-gelu-mlp", 8, 16)(torch.zeros(2, 3, 8)).shape
    torch.Size([2, 3, 16])
    >>> ValueHead(16, 1)(torch.zeros(4, 16)).shape
    torch.Size([4, 1])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlinf.models.embodied.openvla.vision import TowerSpec, build_tower, tower_features


class Projector(nn.Module):
    """Vision features -> LM width, per ``arch_specifier``.

    Args:
        arch_specifier: the config's ``arch_specifier`` (e.g. ``no-align+fused-gelu-mlp``).
        vision_dim: concatenated feature width of the towers.
        llm_dim: the LM's hidden size.
    """

    def __init__(self, arch_specifier: str, vision_dim: int, llm_dim: int):
        super().__init__()
        self.kind = projector_kind(arch_specifier)
        if self.kind == "fused-gelu-mlp":
            self.fc1 = nn.Linear(vision_dim, 4 * vision_dim)
            self.fc2 = nn.Linear(4 * vision_dim, llm_dim)
            self.fc3 = nn.Linear(llm_dim, llm_dim)
        elif self.kind == "gelu-mlp":
            self.fc1 = nn.Linear(vision_dim, llm_dim)
            self.fc2 = nn.Linear(llm_dim, llm_dim)
        else:
            self.projector = nn.Linear(vision_dim, llm_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "linear":
            return self.projector(x)
        x = self.fc2(F.gelu(self.fc1(x)))
        return self.fc3(F.gelu(x)) if self.kind == "fused-gelu-mlp" else x


def projector_kind(arch_specifier: str) -> str:
    """``fused-gelu-mlp``, ``gelu-mlp`` or ``linear`` from an ``arch_specifier``."""
    spec = (arch_specifier or "").lower()
    for kind in ("fused-gelu-mlp", "gelu-mlp"):
        if spec.endswith(kind):
            return kind
    if spec.endswith("linear"):
        return "linear"
    raise ValueError(f"unsupported arch_specifier {arch_specifier!r} (supported: *fused-gelu-mlp, *gelu-mlp, "
                     "*linear)")


class ProprioProjector(nn.Module):
    """OFT's proprio token: ``fc2(GELU(fc1(p)))``."""

    def __init__(self, proprio_dim: int, llm_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.fc2 = nn.Linear(llm_dim, llm_dim)

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(p)))


class ValueHead(nn.Module):
    """RLinf's value head (see the module docstring); ``out_dim`` 1 (chunk) or K (per action)."""

    def __init__(self, hidden: int, out_dim: int = 1, sizes: tuple[int, ...] = (512, 128)):
        super().__init__()
        layers: list[nn.Module] = []
        d = hidden
        for h in sizes:
            layers += [nn.Linear(d, h), nn.GELU()]
            d = h
        layers.append(nn.Linear(d, out_dim, bias=False))
        self.mlp = nn.Sequential(*layers)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initial weights (RLinf's: Kaiming fan-out for hidden layers, N(0, 0.02) last)."""
        linears = [m for m in self.mlp if isinstance(m, nn.Linear)]
        for m in linears[:-1]:
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        nn.init.normal_(linears[-1].weight, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class VisionBackbone(nn.Module):
    """One or two towers whose penultimate-block patch features are concatenated.

    Args:
        specs: one spec (single tower) or two (``featurizer``, ``fused_featurizer``).
    """

    def __init__(self, specs: list[TowerSpec]):
        super().__init__()
        if len(specs) not in (1, 2):
            raise ValueError(f"a vision backbone has 1 or 2 towers, got {len(specs)}")
        if len({(s.image_size, s.num_patches) for s in specs}) != 1:
            raise ValueError("fused towers must take the same image size and give the same number of patches")
        self.specs = list(specs)
        self.featurizer = build_tower(specs[0])
        self.fused_featurizer = build_tower(specs[1]) if len(specs) == 2 else None

    @property
    def feature_dim(self) -> int:
        """Concatenated feature width."""
        return sum(s.width for s in self.specs)

    @property
    def num_patches(self) -> int:
        """Patches per image."""
        return self.specs[0].num_patches

    @property
    def image_size(self) -> int:
        """Input side in pixels."""
        return self.specs[0].image_size

    def towers(self) -> list[tuple[str, nn.Module, TowerSpec]]:
        """``(name, module, spec)`` per tower."""
        out = [("featurizer", self.featurizer, self.specs[0])]
        if self.fused_featurizer is not None:
            out.append(("fused_featurizer", self.fused_featurizer, self.specs[1]))
        return out

    def forward(self, pixels: list[torch.Tensor]) -> torch.Tensor:
        """``pixels[i]`` ``[N, 3, S, S]`` normalised for tower ``i`` -> ``[N, P, feature_dim]``."""
        feats = [tower_features(module, spec, px) for (_, module, spec), px in zip(self.towers(), pixels)]
        return torch.cat(feats, dim=-1)
