"""Log-probabilities of flow-matching policies (πRL: Flow-SDE and Flow-Noise), pure functions.

Convention (π0's): ``t = 1`` is noise, ``t = 0`` is data; ``x_t = t * eps + (1 - t) * a`` and the
velocity ``v`` predicts ``eps - a``. Denoising runs ``N`` steps down the grid

    t_k = 1 - k / N  (k = 0..N-1),  t_N = 0,       Delta_k = t_k - t_{k+1} = 1 / N

Each step is a Gaussian transition ``x_{k+1} ~ N(mu_k, sigma_k^2)`` (element-wise):

* ODE (deterministic): ``mu = x - Delta * v``, ``sigma = 0``.
* Flow-SDE (noise level ``a``): ``s_t = a * sqrt(t / (1 - t))`` (at ``t = 1`` the denominator uses
  ``t_1``), ``mu = x0_hat * (1 - t + Delta) + x1_hat * (t - Delta - s_t^2 Delta / (2 t))`` with
  ``x0_hat = x - t v`` (data estimate) and ``x1_hat = x + (1 - t) v`` (noise estimate), i.e.
  ``mu = x - Delta v - (s_t^2 Delta / (2 t)) * x1_hat``; ``sigma = s_t * sqrt(Delta)``.
* Flow-Noise: ODE mean, ``sigma`` given (a learned noise head).

A chain ``[B, N+1, H, A]`` (``x_0`` the initial noise, ``x_N`` the action chunk) and a mask
``[B, N]`` of its stochastic steps define the log-prob of the sample, element-wise ``[B, H, A]``:

* ``joint = False`` (Flow-SDE): the sum of the stochastic steps' log-densities (one step: that
  transition's log-density).
* ``joint = True`` (Flow-Noise): the mean of ``[log N(x_0; 0, I), stochastic steps...]``.

Example:
    >>> time_grid(4).tolist()
    [1.0, 0.75, 0.5, 0.25, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

NoiseMethod = Literal["flow_sde", "flow_noise"]
NOISE_METHODS = ("flow_sde", "flow_noise")
_LOG_2PI = math.log(2.0 * math.pi)

#: ``velocity_fn(x [B, H, A], t [B]) -> (v [B, H, A], std [B, H, A] or None)``; std is read by
#: Flow-Noise only
VelocityFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]


def time_grid(num_steps: int, device=None) -> torch.Tensor:
    """The denoising times ``[N+1]``: ``linspace(1, 1/N, N)`` then 0.

    >>> time_grid(2).tolist()
    [1.0, 0.5, 0.0]
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    grid = torch.linspace(1.0, 1.0 / num_steps, num_steps, device=device)
    return torch.cat([grid, torch.zeros(1, device=device)])


def endpoint_estimates(x: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x0_hat, x1_hat) = (x - t v, x + (1 - t) v)``: the data and the noise the velocity implies.

    >>> [e.item() for e in endpoint_estimates(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(0.25))]
    [0.5, 2.5]
    """
    return x - t * v, x + (1.0 - t) * v


def ode_step(x: torch.Tensor, v: torch.Tensor, delta: torch.Tensor | float) -> torch.Tensor:
    """Euler step towards the data: ``x - Delta * v``.

    >>> ode_step(torch.tensor(1.0), torch.tensor(2.0), 0.25).item()
    0.5
    """
    return x - delta * v


def sde_sigma(t: torch.Tensor, noise_level: float | torch.Tensor, t_first: float) -> torch.Tensor:
    """Flow-SDE diffusion ``a * sqrt(t / (1 - t'))`` with ``t' = t_first`` where ``t == 1`` else ``t``;
    ``noise_level`` ``a`` is a number or a tensor broadcasting against ``t`` (one per row).

    >>> round(sde_sigma(torch.tensor(0.5), 0.5, 0.75).item(), 6)
    0.5
    >>> sde_sigma(torch.tensor(1.0), 0.5, 0.75).item()  # 0.5 * sqrt(1 / 0.25)
    1.0
    """
    t = torch.as_tensor(t, dtype=torch.float32)
    denom = torch.where(t >= 1.0, torch.full_like(t, t_first), t)
    return noise_level * torch.sqrt(t / (1.0 - denom))


def annealed_noise_level(start: float, end: float, anneal_steps: int, step: int) -> float:
    """RLinf's ``noise_anneal`` schedule of the Flow-SDE level: linear from ``start`` at training
    step 0 to ``end`` at ``anneal_steps``, then constant,
    ``a(step) = start + (end - start) * min(step, anneal_steps) / anneal_steps``.

    >>> [round(annealed_noise_level(0.7, 0.3, 400, s), 6) for s in (0, 100, 400, 1000)]
    [0.7, 0.6, 0.3, 0.3]
    """
    if anneal_steps < 1:
        raise ValueError(f"anneal_steps must be >= 1, got {anneal_steps}")
    return start + (end - start) * min(max(step, 0), anneal_steps) / anneal_steps


def flow_sde_level(noise_level: float, noise_anneal: bool, noise_params: tuple[float, float, int], step: int,
                   dtype: torch.dtype = torch.float32) -> float:
    """The Flow-SDE level a rollout at training ``step`` samples with: ``noise_level``, or with
    ``noise_anneal`` :func:`annealed_noise_level` over ``noise_params`` ``(start, end,
    anneal_steps)``; rounded to ``dtype`` (the chain's), so the level stored beside the chain
    (:func:`pack_chain`) is exactly the one sampled with.

    >>> flow_sde_level(0.5, False, (0.7, 0.3, 400), 200), flow_sde_level(0.5, True, (0.7, 0.3, 400), 200)
    (0.5, 0.5)
    >>> flow_sde_level(0.5, True, (0.7, 0.3, 400), 0, torch.bfloat16)
    0.69921875
    """
    level = annealed_noise_level(*noise_params, step) if noise_anneal else noise_level
    return float(torch.tensor(level, dtype=dtype))


def sde_step_moments(x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, delta: torch.Tensor | float,
                     noise_level: float | torch.Tensor, t_first: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of one Flow-SDE step (module docstring); ``t`` broadcasts against ``x``.

    >>> m, s = sde_step_moments(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(0.5), 0.5, 0.5, 0.5)
    >>> round(m.item(), 6), round(s.item(), 6)  # s_t = 0.5; 1 - 1 - (0.25 * 0.5 / 1) * 2
    (-0.25, 0.353553)
    """
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    sigma = sde_sigma(t, noise_level, t_first).to(x.dtype)
    _, x1_hat = endpoint_estimates(x, v, t)
    mean = ode_step(x, v, delta) - (sigma ** 2 * delta / (2.0 * t)) * x1_hat
    std = sigma * math.sqrt(float(delta)) if not isinstance(delta, torch.Tensor) else sigma * delta.sqrt()
    return mean, torch.broadcast_to(std, mean.shape)


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``log N(x; mean, std^2)`` (fp32); entries with ``std == 0`` give 0.

    >>> gaussian_logprob(torch.tensor([0.0, 5.0]), torch.zeros(2), torch.tensor([1.0, 0.0])).tolist()
    [-0.9189385175704956, 0.0]
    """
    x, mean, std = x.float(), mean.float(), std.float()
    zero = std == 0
    safe = torch.where(zero, torch.ones_like(std), std)
    logp = -0.5 * ((x - mean) / safe) ** 2 - torch.log(safe) - 0.5 * _LOG_2PI
    return torch.where(zero, torch.zeros_like(logp), logp)


def gaussian_entropy_of_std(std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``0.5 * log(2 pi e std^2)`` (the Flow-Noise entropy).

    >>> round(gaussian_entropy_of_std(torch.tensor(1.0)).item(), 6)
    1.418939
    """
    return 0.5 * (1.0 + _LOG_2PI) + torch.log(std.float())


def step_moments(method: NoiseMethod, x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, delta: float | torch.Tensor,
                 noise_level: float | torch.Tensor, t_first: float, noise_std: torch.Tensor | None,
                 stochastic: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of one step for each batch row; rows where ``stochastic`` ``[B]`` is false take
    the ODE step (std 0).

    Args:
        method: flow_sde or flow_noise.
        x, v: ``[B, H, A]``.
        t: the step's time (a scalar tensor, or one per row broadcasting against ``x``).
        delta: step size (a float, or a tensor broadcasting against ``x``).
        noise_level: Flow-SDE ``a`` (a number, or a tensor broadcasting against ``x``).
        t_first: ``t_1`` of the grid.
        noise_std: Flow-Noise std ``[B, H, A]``.
        stochastic: ``[B]`` bool.

    Returns:
        ``(mean, std)``, each ``[B, H, A]``.
    """
    ode = ode_step(x, v, delta)
    if method == "flow_sde":
        mean, std = sde_step_moments(x, v, t, delta, noise_level, t_first)
    elif method == "flow_noise":
        if noise_std is None:
            raise ValueError("flow_noise needs the noise head's std")
        mean, std = ode, noise_std
    else:
        raise ValueError(f"noise_method must be one of {NOISE_METHODS}, got {method!r}")
    row = stochastic.view(-1, *([1] * (x.dim() - 1)))
    return torch.where(row, mean, ode), torch.where(row, std, torch.zeros_like(std))


def combine_logprobs(init_logprob: torch.Tensor, step_logprobs: torch.Tensor, mask: torch.Tensor,
                     joint: bool) -> torch.Tensor:
    """Element-wise log-prob ``[B, H, A]`` of a chain from its parts.

    Args:
        init_logprob: ``[B, H, A]`` ``log N(x_0; 0, I)``.
        step_logprobs: ``[B, N, H, A]`` each step's transition log-density.
        mask: ``[B, N]`` the stochastic steps.
        joint: mean over ``[init, stochastic steps]`` (Flow-Noise) instead of the sum of the
            stochastic steps (Flow-SDE).

    Returns:
        ``[B, H, A]``.

    >>> combine_logprobs(torch.full((1, 1, 1), -3.0), torch.tensor([[[[-1.0]], [[-2.0]]]]),
    ...                  torch.tensor([[True, True]]), joint=True).item()
    -2.0
    """
    m = mask.to(step_logprobs.dtype).view(*mask.shape, *([1] * (step_logprobs.dim() - 2)))
    steps = (step_logprobs * m).sum(1)
    if not joint:
        return steps
    count = 1.0 + m.sum(1)
    return (init_logprob + steps) / count


@dataclass
class FlowSample:
    """One sampled chain.

    Attributes:
        chain: ``[B, N+1, H, A]``; ``chain[:, -1]`` is the action chunk.
        mask: ``[B, N]`` bool, the stochastic steps.
        logprobs: ``[B, H, A]`` (see :func:`combine_logprobs`).
        entropy: ``[B, H, A]`` mean Gaussian entropy of the stochastic steps (0 where none).
    """

    chain: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    entropy: torch.Tensor


def stochastic_mask(method: NoiseMethod, batch: int, num_steps: int, ignore_last: bool,
                    deterministic: bool, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Which steps sample: none when ``deterministic``; Flow-Noise all; Flow-SDE one step ``k``
    drawn uniformly from ``0..N-1`` (``0..N-2`` with ``ignore_last``), the same for the batch.

    >>> stochastic_mask("flow_noise", 2, 3, False, False).tolist()
    [[True, True, True], [True, True, True]]
    """
    mask = torch.zeros(batch, num_steps, dtype=torch.bool, device=device)
    if deterministic:
        return mask
    if method == "flow_noise":
        return ~mask
    high = num_steps - 1 if ignore_last and num_steps > 1 else num_steps
    k = int(torch.randint(high, (1,), generator=generator, device=generator.device if generator else None))
    mask[:, k] = True
    return mask


def sample_chain(velocity_fn: VelocityFn, x0: torch.Tensor, method: NoiseMethod, num_steps: int,
                 noise_level: float, joint: bool, mask: torch.Tensor,
                 generator: torch.Generator | None = None) -> FlowSample:
    """Denoises ``x0`` ``[B, H, A]`` over the grid, sampling the steps ``mask`` marks.

    Args:
        velocity_fn: see :data:`VelocityFn`.
        x0: the initial noise (its log-density enters the joint log-prob).
        method, num_steps, noise_level, joint: see the module docstring.
        mask: ``[B, N]`` stochastic steps (:func:`stochastic_mask`).
        generator: for the step noise.

    Returns:
        A :class:`FlowSample`.

    >>> zero_v = lambda x, t: (torch.zeros_like(x), None)
    >>> s = sample_chain(zero_v, torch.ones(1, 1, 1), "flow_sde", 2, 0.5, False,
    ...                  torch.tensor([[False, False]]))
    >>> s.chain.view(-1).tolist(), s.logprobs.item()
    ([1.0, 1.0, 1.0], 0.0)
    """
    grid = time_grid(num_steps, x0.device)
    times = grid.tolist()
    x, states, step_lp, entropies = x0, [x0], [], []
    for k in range(num_steps):
        t = grid[k]
        v, noise_std = velocity_fn(x, t.expand(x.shape[0]))
        if not bool(mask[:, k].any()):  # an ODE step for every row: no noise, log-density 0
            x = ode_step(x, v, times[k] - times[k + 1])
            states.append(x)
            step_lp.append(torch.zeros_like(x))
            entropies.append(torch.zeros_like(x))
            continue
        mean, std = step_moments(method, x, v, t, times[k] - times[k + 1], noise_level, times[1],
                                 noise_std, mask[:, k])
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        x = mean + std * noise
        states.append(x)
        step_lp.append(gaussian_logprob(x, mean, std))
        entropies.append(torch.where(std > 0, gaussian_entropy_of_std(std.clamp_min(1e-12)), torch.zeros_like(std)))
        del v
    chain = torch.stack(states, 1)
    init = gaussian_logprob(x0, torch.zeros_like(x0), torch.ones_like(x0))
    logprobs = combine_logprobs(init, torch.stack(step_lp, 1), mask, joint)
    return FlowSample(chain, mask, logprobs, _mean_entropy(torch.stack(entropies, 1), mask))


def chain_logprob(velocity_fn: VelocityFn, chain: torch.Tensor, mask: torch.Tensor, method: NoiseMethod,
                  noise_level: float | torch.Tensor, joint: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Recomputes (differentiably) the log-prob and entropy of a stored chain under
    ``velocity_fn``; equals :func:`sample_chain`'s for the same weights.

    Args:
        velocity_fn: see :data:`VelocityFn`.
        chain: ``[B, N+1, H, A]``.
        mask: ``[B, N]`` bool.
        method, joint: as sampled.
        noise_level: Flow-SDE ``a`` as sampled: a number, or ``[B, N]`` per (row, step)
            (:func:`unpack_step_levels`).

    Returns:
        ``(logprobs, entropy)``, each ``[B, H, A]``.
    """
    num_steps = chain.shape[1] - 1
    grid = time_grid(num_steps, chain.device)
    times = grid.tolist()
    step_lp, entropies = [], []
    for k in range(num_steps):
        t, x = grid[k], chain[:, k]
        if not bool(mask[:, k].any()):
            step_lp.append(torch.zeros_like(x))
            entropies.append(torch.zeros_like(x))
            continue
        v, noise_std = velocity_fn(x, t.expand(x.shape[0]))
        level = _pair_levels(noise_level, slice(None), k, x.dim())
        mean, std = step_moments(method, x, v, t, times[k] - times[k + 1], level, times[1], noise_std, mask[:, k])
        step_lp.append(gaussian_logprob(chain[:, k + 1], mean, std))
        entropies.append(torch.where(std > 0, gaussian_entropy_of_std(std.clamp_min(1e-12)), torch.zeros_like(std)))
    x0 = chain[:, 0]
    init = gaussian_logprob(x0, torch.zeros_like(x0), torch.ones_like(x0))
    logprobs = combine_logprobs(init, torch.stack(step_lp, 1), mask, joint)
    return logprobs, _mean_entropy(torch.stack(entropies, 1), mask)


#: ``rows_velocity_fn(x [M, H, A], t [M], rows [M]) -> (v, std or None)``: the velocity at the
#: points ``x`` at times ``t``, each conditioned on batch row ``rows[m]``'s observation
RowsVelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]


def _pair_levels(noise_level: float | torch.Tensor, rows, steps, dim: int) -> float | torch.Tensor:
    """The Flow-SDE level of the ``(rows, steps)`` pairs, shaped to broadcast against their
    ``dim``-dimensional points: ``noise_level`` itself when it is a number, else its
    ``[B, N]`` entries."""
    if not isinstance(noise_level, torch.Tensor):
        return noise_level
    return noise_level[rows, steps].float().reshape((-1,) + (1,) * (dim - 1))


def chain_logprob_gathered(rows_velocity_fn: RowsVelocityFn, chain: torch.Tensor, mask: torch.Tensor,
                           method: NoiseMethod, noise_level: float | torch.Tensor,
                           joint: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`chain_logprob` with one velocity call over the stochastic ``(row, step)`` pairs only.

    A stored chain needs no sequential pass: every transition ``x_k -> x_{k+1}`` is known, so the
    ``M = mask.sum()`` stochastic ones are gathered into one batch (Flow-SDE: ``M = B``, one network
    evaluation per row instead of one per step; Flow-Noise: ``M = B N`` in one call) and their
    log-densities are scattered back. Same values as :func:`chain_logprob`.

    Args:
        rows_velocity_fn: see :data:`RowsVelocityFn`.
        chain, mask, method, noise_level, joint: as :func:`chain_logprob`.

    Returns:
        ``(logprobs, entropy)``, each ``[B, H, A]``.

    >>> v = lambda x, t, rows: (0.5 * x, None)
    >>> chain = torch.tensor([1.0, 0.9, 0.2]).view(1, 3, 1, 1)
    >>> mask = torch.tensor([[False, True]])
    >>> lp, _ = chain_logprob_gathered(v, chain, mask, "flow_sde", 0.5, False)
    >>> ref, _ = chain_logprob(lambda x, t: (0.5 * x, None), chain, mask, "flow_sde", 0.5, False)
    >>> bool(torch.allclose(lp, ref))
    True
    """
    b, n = mask.shape
    grid = time_grid(n, chain.device)
    rows, steps = mask.nonzero(as_tuple=True)
    x, target = chain[rows, steps], chain[rows, steps + 1]
    t = grid[steps]
    v, noise_std = rows_velocity_fn(x, t, rows)
    shape = (-1,) + (1,) * (x.dim() - 1)
    delta = (t - grid[steps + 1]).view(shape)
    every = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)  # each gathered pair is a stochastic step
    level = _pair_levels(noise_level, rows, steps, x.dim())
    mean, std = step_moments(method, x, v, t.view(shape), delta, level, float(grid[1]), noise_std, every)
    step_lp = chain.new_zeros((b, n) + chain.shape[2:])
    entropies = chain.new_zeros((b, n) + chain.shape[2:])
    step_lp = step_lp.index_put((rows, steps), gaussian_logprob(target, mean, std))
    entropies = entropies.index_put((rows, steps), gaussian_entropy_of_std(std.clamp_min(1e-12)))
    x0 = chain[:, 0]
    init = gaussian_logprob(x0, torch.zeros_like(x0), torch.ones_like(x0))
    return combine_logprobs(init, step_lp, mask, joint), _mean_entropy(entropies, mask)


def _mean_entropy(entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(entropies.dtype).view(*mask.shape, *([1] * (entropies.dim() - 2)))
    return (entropies * m).sum(1) / m.sum(1).clamp_min(1.0)


def aggregate_flow_logprobs(logprobs: torch.Tensor, level: Literal["chunk_level", "element_level"]) -> torch.Tensor:
    """``chunk_level``: the sum over the chunk's elements ``[B, H, A] -> [B]`` (one ratio per chunk);
    ``element_level``: unchanged (one ratio per element).

    >>> aggregate_flow_logprobs(torch.ones(2, 3, 4), "chunk_level").tolist()
    [12.0, 12.0]
    """
    if level == "chunk_level":
        return logprobs.flatten(1).sum(1)
    if level == "element_level":
        return logprobs
    raise ValueError(f"level must be chunk_level or element_level, got {level!r}")


def squashed_std(raw: torch.Tensor, std_range: tuple[float, float]) -> torch.Tensor:
    """A noise head's output -> std in ``[min_std, max_std]``: ``tanh`` squashes ``raw`` into the
    log-variance range ``[log min_std^2, log max_std^2]`` (πRL's / ReinFlow's ``ExploreNoiseNet``),
    ``std = exp(logvar / 2)``.

    >>> [round(s, 6) for s in squashed_std(torch.tensor([-50.0, 0.0, 50.0]), (0.08, 0.32)).tolist()]
    [0.08, 0.16, 0.32]
    """
    lo, hi = std_range
    frac = (torch.tanh(raw) + 1.0) / 2.0
    return torch.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo)))


def pack_chain(chain: torch.Tensor, mask: torch.Tensor, rows: int,
               noise_level: float | torch.Tensor = 1.0) -> torch.Tensor:
    """A chain and its stochastic steps as ``raw_actions`` ``[B, rows, W + S]`` (what the rollout
    stores and :func:`unpack_chain` reads back for the update).

    The chain ``[B, S+1, H, A]`` is laid out per action row (``x_0[h], ..., x_S[h]`` for ``h = 0..H-1``),
    flattened, zero-padded to a multiple of ``rows`` and cut into ``rows`` rows of ``W`` values;
    each row then gets ``S`` step slots: 0 for a step ``mask`` ``[B, S]`` leaves deterministic,
    ``noise_level`` (> 0: the Flow-SDE ``a`` the step was sampled with, a number or one per batch
    row ``[B]``; 1 for Flow-Noise) for a stochastic one, so the update recomputes the density
    the rollout sampled from even when the level changes during training (``noise_anneal``).
    With ``rows == H`` row ``h`` holds exactly action row ``h``'s chain.

    >>> raw = pack_chain(torch.arange(12.0).view(1, 3, 2, 2), torch.tensor([[True, False]]), rows=2,
    ...                  noise_level=0.5)
    >>> raw.tolist()
    [[[0.0, 1.0, 4.0, 5.0, 8.0, 9.0, 0.5, 0.0], [2.0, 3.0, 6.0, 7.0, 10.0, 11.0, 0.5, 0.0]]]
    """
    b, s1, h, a = chain.shape
    flat = chain.permute(0, 2, 1, 3).reshape(b, h * s1 * a)
    width = -(-flat.shape[1] // rows)
    if width * rows != flat.shape[1]:
        flat = torch.nn.functional.pad(flat, (0, width * rows - flat.shape[1]))
    body = flat.view(b, rows, width)
    level = torch.as_tensor(noise_level, dtype=body.dtype, device=body.device).reshape(-1, 1)
    if not bool((level > 0).all()):
        raise ValueError(f"noise_level must be > 0 (0 marks a deterministic step), got {noise_level}")
    slots = mask.to(body.dtype) * level
    return torch.cat([body, slots[:, None, :].expand(b, rows, s1 - 1)], dim=-1)


def packed_width(num_steps: int, horizon: int, dim: int, rows: int) -> int:
    """Width of :func:`pack_chain`'s rows: ``ceil(H (S+1) A / rows) + S``.

    >>> packed_width(4, 50, 32, 5)
    1604
    """
    return -(-horizon * (num_steps + 1) * dim // rows) + num_steps


def unpack_chain(raw_actions: torch.Tensor, num_steps: int, horizon: int, dim: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_chain`: ``(chain [B, S+1, H, A] fp32, mask [B, S] bool)``
    (:func:`unpack_step_levels` reads the stochastic steps' noise levels).

    Raises:
        ValueError: the rows are not :func:`packed_width` wide.

    >>> chain, mask = unpack_chain(pack_chain(torch.arange(12.0).view(1, 3, 2, 2),
    ...                                       torch.tensor([[True, False]]), rows=3), 2, 2, 2)
    >>> torch.equal(chain, torch.arange(12.0).view(1, 3, 2, 2)), mask.tolist()
    (True, [[True, False]])
    """
    b, rows, w = raw_actions.shape
    n = horizon * (num_steps + 1) * dim
    if w != packed_width(num_steps, horizon, dim, rows):
        raise ValueError(f"raw_actions must be [N, {rows}, {packed_width(num_steps, horizon, dim, rows)}] "
                         f"(num_steps {num_steps}, horizon {horizon}, {dim} action dims), "
                         f"got {tuple(raw_actions.shape)}")
    width = w - num_steps
    flat = raw_actions[..., :width].reshape(b, rows * width)[:, :n]
    chain = flat.reshape(b, horizon, num_steps + 1, dim).permute(0, 2, 1, 3)
    return chain.float(), unpack_step_levels(raw_actions, num_steps) > 0


def unpack_step_levels(raw_actions: torch.Tensor, num_steps: int) -> torch.Tensor:
    """The step slots of :func:`pack_chain`'s rows, ``[B, S]`` fp32: each step's noise level
    (0 = deterministic), what :func:`chain_logprob_gathered` takes as ``noise_level``.

    >>> raw = pack_chain(torch.zeros(2, 3, 1, 1), torch.tensor([[True, False], [False, True]]), rows=1,
    ...                  noise_level=torch.tensor([0.7, 0.25]))
    >>> unpack_step_levels(raw, 2).tolist()
    [[0.699999988079071, 0.0], [0.0, 0.25]]
    """
    return raw_actions[:, 0, raw_actions.shape[-1] - num_steps:].float()
