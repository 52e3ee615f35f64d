"""CNN actor-critic on camera images, optionally with the state vector.

Encoder (NatureCNN, as ManiSkill's RGB PPO baseline): images ``[N, H, W, 3]`` uint8 are scaled to
[0, 1], optionally centre-cropped, resized to ``image_size`` and mapped to [-1, 1] inside the model;
a wrist image (``num_images=2``) is resized the same way and stacked on the channel axis. Then
``Conv(32, 8, s4) - ReLU - Conv(64, 4, s2) - ReLU - Conv(64, 3, s1) - ReLU - Flatten -
Linear(feature_dim) - ReLU``. With ``state_dim > 0`` the state goes through
``Linear(feature_dim) - ReLU`` and is concatenated. Heads: ``[Linear, ReLU] x hidden_sizes ->
Linear(K * A)`` means (orthogonal init, gain 0.01) and the critic (gain 1.0). The critic reads the
actor's encoder (``shared_encoder``, default) or its own copy.

Images must be at least 36 x 36 after resizing (the three convolutions' receptive field).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlinf.models.embodied.base import layer_init, mlp, preprocess_images, to_tensor
from rlinf.models.embodied.gaussian import GaussianActorCritic


@dataclass(frozen=True)
class CNNPolicyConfig:
    """Sizes of a :class:`CNNPolicy`.

    Attributes:
        action_dim: ``A``.
        num_action_chunks: ``K``.
        image_size: ``(h, w)`` the images are resized to inside the model (>= 36 each).
        num_images: 1 (main camera) or 2 (main + wrist, stacked on channels).
        state_dim: length of the state vector fed next to the image features (0 = images only).
        feature_dim: width of the image (and state) features.
        hidden_sizes: widths of the hidden layers of the actor head.
        critic_hidden_sizes: widths of the critic head's hidden layers; None = hidden_sizes.
        shared_encoder: the critic reads the actor's encoder (else it has its own).
        center_crop: centre-crop 90% of the area before resizing.
        init_log_std: initial log standard deviation.
        value_type: chunk_level or action_level.
        add_value_head: build the critic.
        action_low, action_high: env action bounds; None = [-1, 1].
    """

    action_dim: int
    num_action_chunks: int = 1
    image_size: tuple[int, int] = (64, 64)
    num_images: int = 1
    state_dim: int = 0
    feature_dim: int = 256
    hidden_sizes: tuple[int, ...] = (256,)
    critic_hidden_sizes: tuple[int, ...] | None = None
    shared_encoder: bool = True
    center_crop: bool = False
    init_log_std: float = 0.0
    value_type: str = "chunk_level"
    add_value_head: bool = True
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None


class NatureCNNEncoder(nn.Module):
    """NatureCNN image (+ state) encoder producing ``[N, feature_dim * (1 + has_state)]``.

    Args:
        in_channels: image channels (3 per camera).
        image_size: ``(h, w)`` of its input.
        feature_dim: output width per modality.
        state_dim: 0 or the state length.
    """

    def __init__(self, in_channels: int, image_size: tuple[int, int], feature_dim: int, state_dim: int = 0):
        super().__init__()
        if min(image_size) < 36:
            raise ValueError(f"NatureCNN needs images of at least 36 x 36, got {tuple(image_size)}")
        self.conv = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, in_channels, *image_size)).shape[1]
        self.image_fc = nn.Sequential(layer_init(nn.Linear(flat, feature_dim)), nn.ReLU())
        self.state_fc = (nn.Sequential(layer_init(nn.Linear(state_dim, feature_dim)), nn.ReLU())
                         if state_dim > 0 else None)
        self.out_dim = feature_dim * (2 if state_dim > 0 else 1)

    def forward(self, pixels: torch.Tensor, states: torch.Tensor | None = None) -> torch.Tensor:
        """``pixels`` ``[N, C, h, w]`` (normalised), ``states`` ``[N, D]`` -> features."""
        f = self.image_fc(self.conv(pixels))
        if self.state_fc is not None:
            f = torch.cat([f, self.state_fc(states)], dim=-1)
        return f


class CNNPolicy(GaussianActorCritic):
    """Gaussian policy with a NatureCNN encoder on images (optionally + wrist image + state).

    Args:
        config: sizes, see :class:`CNNPolicyConfig`.

    Example:
        >>> import torch
        >>> policy = CNNPolicy(CNNPolicyConfig(action_dim=2, num_action_chunks=2, image_size=(36, 36),
        ...                                    feature_dim=16, hidden_sizes=(16,)))
        >>> images = torch.randint(0, 256, (3, 48, 48, 3), dtype=torch.uint8)
        >>> out = policy.act(images=images)
        >>> out.actions.shape, out.values.shape
        (torch.Size([3, 2, 2]), torch.Size([3]))
    """

    config_cls = CNNPolicyConfig

    def __init__(self, config: CNNPolicyConfig):
        super().__init__(config.action_dim, config.num_action_chunks, config.value_type,
                         config.init_log_std, config.action_low, config.action_high)
        if config.num_images not in (1, 2):
            raise ValueError(f"num_images must be 1 or 2, got {config.num_images}")
        self.config = config
        self.image_size = tuple(int(s) for s in config.image_size)
        in_ch = 3 * config.num_images
        self.encoder = NatureCNNEncoder(in_ch, self.image_size, config.feature_dim, config.state_dim)
        self.critic_encoder = (None if config.shared_encoder or not config.add_value_head else
                               NatureCNNEncoder(in_ch, self.image_size, config.feature_dim, config.state_dim))
        feat = self.encoder.out_dim
        self.actor_mean = mlp(feat, config.hidden_sizes, config.num_action_chunks * config.action_dim,
                              nn.ReLU, out_std=0.01)
        if config.add_value_head:
            critic_sizes = config.critic_hidden_sizes if config.critic_hidden_sizes is not None else config.hidden_sizes
            self.critic = mlp(feat, critic_sizes, self.value_out_dim, nn.ReLU, out_std=1.0)

    def _pixels(self, images, wrist_images) -> torch.Tensor:
        if images is None:
            raise ValueError("CNNPolicy needs images [N, H, W, 3]")
        dev = self.log_std.device
        x = preprocess_images(images, self.image_size, self.config.center_crop, device=dev)
        if self.config.num_images == 2:
            if wrist_images is None:
                raise ValueError("this CNNPolicy was built with a wrist camera (num_images=2); pass wrist_images")
            x = torch.cat([x, preprocess_images(wrist_images, self.image_size, self.config.center_crop,
                                                device=dev)], dim=1)
        return x

    def features(self, states=None, images=None, wrist_images=None, instructions=None):
        """Encoder features for the actor and the critic (the same tensor when shared)."""
        x = self._pixels(images, wrist_images)
        s = None
        if self.config.state_dim > 0:
            if states is None:
                raise ValueError(f"this CNNPolicy reads states [N, {self.config.state_dim}]; pass states")
            s = to_tensor(states, x.device).float()
        fa = self.encoder(x, s)
        fc = fa if self.critic_encoder is None else self.critic_encoder(x, s)
        return fa, fc
