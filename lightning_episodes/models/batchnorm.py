"""Batch normalisation with per-episode statistics.

Few-shot training forwards a batch of episodes at once, but an episode's features must not depend on its
batch-mates or on the number of devices (docs/method.md, "Batch norm during training"): otherwise its
difficulty would. `EpisodicBatchNorm2d` therefore normalises every episode with its own statistics, as
if the episodes were forwarded one by one through `torch.nn.BatchNorm2d` (the way learn2learn, which the
paper used, processes them), in one vectorised pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_episodes.models.devices import on_cpu

EvalBatchNorm = Literal["running", "episode"]
"""Statistics batch norm uses at evaluation: the running buffers, or the episode's own inputs."""

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_eval_batch_norm(mode: str) -> EvalBatchNorm:
    if mode not in get_args(EvalBatchNorm):
        raise ValueError(f"eval_batch_norm must be one of {get_args(EvalBatchNorm)}, got {mode!r}")
    return mode  # type: ignore[return-value]


class EpisodicBatchNorm2d(nn.Module):
    """2-D batch norm whose training statistics are computed per episode.

    Equivalent to forwarding each episode alone through `torch.nn.BatchNorm2d` (Ioffe & Szegedy, 2015),
    as learn2learn does, but vectorised: the input is viewed as `[B, N, C, H, W]` and reduced over
    `N, H, W`. The module has the same parameters and buffers (`weight`, `bias`, `running_mean`,
    `running_var`, `num_batches_tracked`) as `torch.nn.BatchNorm2d`, so state dicts are interchangeable.

    - Training: each episode is normalised with its biased batch statistics; the running buffers are
      updated exactly as `B` successive `nn.BatchNorm2d` forwards of the episodes in order would update
      them (running variance from the unbiased variance, `num_batches_tracked += B`).
    - Evaluation with `track_running_stats=True`: the running statistics (`eval_batch_norm="running"`,
      the default) or the episode's own statistics without touching any buffer (`"episode"`).
    - `track_running_stats=False` (MAML/ANIL, which keep no buffers): always the episode's own
      statistics, so evaluation cannot change the model.
    - Many processes (DDP): normalisation stays local, but with `sync_running_stats=True` the ranks
      all-gather their episodes' statistics (detached, `[B_local, 2C]`, in rank order, which is the
      global batch order of docs/method.md's slicing) before updating the buffers, so every rank's buffers
      are those of one process forwarding the whole global batch. Like `SyncBatchNorm`, this is a
      collective in every training forward: all ranks must forward the same number of episodes the
      same number of times (DDP training does).

    It is deliberately not a `torch.nn.modules.batchnorm._BatchNorm`, so that
    `SyncBatchNorm.convert_sync_batchnorm` (Lightning's `sync_batchnorm=True`) leaves it alone: synced
    statistics would mix episodes across devices.

    Args:
        num_features: Number of channels `C`.
        eps: Added to the variance for numerical stability. Default: 1e-5.
        momentum: Weight of the new statistics in the running averages, or None for a cumulative
            average, as in `torch.nn.BatchNorm2d`. Default: 0.1.
        affine: Whether to learn a per-channel scale and shift. Default: True.
        track_running_stats: Whether to keep running statistics. Default: True.
        eval_batch_norm: `"running"` or `"episode"`, see above; change it later with
            `set_eval_batch_norm`. Default: `"running"`.
        sync_running_stats: Update the running buffers from all processes' episodes when
            `torch.distributed` is initialised with several processes. Default: True.

    Raises:
        ValueError: If `num_features` is not positive, `eps` is negative, `momentum` is outside
            [0, 1] or `eval_batch_norm` is unknown.

    Example:
        >>> norm = EpisodicBatchNorm2d(8)
        >>> norm(torch.randn(4, 10, 8, 5, 5)).shape  # 4 episodes of 10 images
        torch.Size([4, 10, 8, 5, 5])
    """

    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        eval_batch_norm: EvalBatchNorm = "running",
        sync_running_stats: bool = True,
    ) -> None:
        super().__init__()
        if num_features <= 0:
            raise ValueError(f"num_features must be positive, got {num_features}")
        if eps < 0:
            raise ValueError(f"eps must be non-negative, got {eps}")
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1] or None, got {momentum}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.eval_batch_norm: EvalBatchNorm = _check_eval_batch_norm(eval_batch_norm)
        self.sync_running_stats = sync_running_stats
        if affine:
            self.weight: nn.Parameter | None = nn.Parameter(torch.ones(num_features))
            self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        # (mean, var, values per channel) of the episodes seen inside `deferred_running_stats`, else None
        self._pending: list[tuple[Tensor, Tensor, int]] | None = None

    def reset_running_stats(self) -> None:
        """Reset the running buffers to their initial values (mean 0, variance 1, count 0)."""
        if self.running_mean is not None and self.running_var is not None:
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.zero_()

    def forward(self, x: Tensor, episodes: int | None = None) -> Tensor:
        """Normalise a batch of episodes.

        Args:
            x: `[B, N, C, H, W]` (B episodes of N images), or `[M, C, H, W]`: one episode, or `episodes`
                equal-sized episodes stacked along the first dimension when `episodes` is given.
            episodes: Number of episodes in a 4-D input. Default: one.

        Returns:
            The normalised tensor, with the shape of `x`.

        Raises:
            ValueError: On a wrong rank or channel count, an episode count that does not divide the
                batch, or an episode with a single value per channel in training.
        """
        if x.dim() not in (4, 5) or x.shape[-3] != self.num_features:
            raise ValueError(
                f"expected [B, N, {self.num_features}, H, W] or [M, {self.num_features}, H, W], got {tuple(x.shape)}"
            )
        running = self.running_mean is not None and self.running_var is not None
        if not self.training and running and self.eval_batch_norm == "running":
            # Running statistics are shared by all episodes: the fused kernel does it on the 4-D view.
            flat = x.flatten(0, 1) if x.dim() == 5 else x
            out = F.batch_norm(flat, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
            return out.view_as(x)
        if x.dim() == 5:
            return self._per_episode(x)
        count = 1 if episodes is None else episodes
        if count <= 0 or x.shape[0] % count != 0:
            raise ValueError(f"episodes={episodes} must be positive and divide the batch size {x.shape[0]}")
        if count > 1:
            return self._per_episode(x.unflatten(0, (count, -1))).flatten(0, 1)
        self._check_values(x[:, 0].numel(), x.shape)
        if not (self.training and running):
            # One episode and no buffer to update (MAML/ANIL forward episodes one by one, evaluation with the
            # episode's statistics): PyTorch's fused kernel is exactly nn.BatchNorm2d, double backward included.
            return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)
        out, mean, var = self._one_episode(x)
        self._record(mean[None], var[None], x[:, 0].numel())
        return out

    def _check_values(self, values: int, shape: torch.Size) -> None:
        if self.training and values <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel per episode when training, got input size {tuple(shape)}"
            )

    def _one_episode(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One episode ``[N, C, H, W]`` normalised with its own statistics, and those statistics ``[C]`` (biased).

        PyTorch's fused kernel, in any layout and precision: ``channels_last`` stays ``channels_last`` and a bfloat16
        input (autocast) gets float32 statistics, as ``nn.BatchNorm2d`` computes them."""
        out, mean, invstd = torch.native_batch_norm(x, self.weight, self.bias, None, None, True, 0.0, self.eps)
        return out, mean, _variance(invstd, self.eps)

    def _per_episode(self, x: Tensor) -> Tensor:
        """Normalise `[B, N, C, H, W]` with each episode's own statistics (updating buffers if training)."""
        values = x.shape[1] * x.shape[3] * x.shape[4]
        self._check_values(values, x.shape)
        if on_cpu(x):
            # Episode by episode: each is one contiguous block (in either layout), so the fused kernel needs no
            # copy, and one episode's activations stay in the caches (benchmarks/batchnorm.py: faster than one
            # kernel over a transposed copy, and the only way to keep channels_last and bfloat16 fast).
            outs, means, variances = zip(*(self._one_episode(episode) for episode in x.unbind(0)), strict=True)
            out, mean, var = torch.stack(outs), torch.stack(means), torch.stack(variances)
        elif x.dtype in _LOW_PRECISION or not x.is_contiguous():
            # Low-precision inputs (autocast) get float32 statistics, as PyTorch's own batch norm computes them;
            # composing the normalisation elementwise also keeps a channels_last layout.
            var, mean = torch.var_mean(x.float(), dim=(1, 3, 4), correction=0)  # [B, C] each
            scale = torch.rsqrt(var + self.eps)
            if self.weight is not None:
                scale = scale * self.weight
            shift = -mean * scale
            if self.bias is not None:
                shift = shift + self.bias
            out = torch.addcmul(shift[:, None, :, None, None].to(x.dtype), x, scale[:, None, :, None, None].to(x.dtype))
        else:
            # On an accelerator, episodes become channels: batch norm of [N, B*C, H, W] normalises each (episode,
            # channel) over its own N, H, W, i.e. per-episode statistics, in one fused kernel (forward, backward
            # and double backward) for the whole batch.
            b, n, c = x.shape[:3]
            flat = x.transpose(0, 1).reshape(n, b * c, *x.shape[3:])
            weight = None if self.weight is None else self.weight.repeat(b)
            bias = None if self.bias is None else self.bias.repeat(b)
            out, mean, invstd = torch.native_batch_norm(flat, weight, bias, None, None, True, 0.0, self.eps)
            out = out.view(n, b, c, *x.shape[3:]).transpose(0, 1)
            mean, var = mean.view(b, c), _variance(invstd.view(b, c), self.eps)
        if self.training:
            self._record(mean, var, values)
        return out

    def _record(self, mean: Tensor, var: Tensor, values: int) -> None:
        """Update the running buffers with the episodes' ``[B, C]`` statistics, or keep them for later inside
        :func:`deferred_running_stats`."""
        if self._pending is not None:
            self._pending.append((mean.detach(), var.detach(), values))
        else:
            self._update_running_stats(mean.detach(), var.detach(), values)

    @torch.no_grad()
    def _update_running_stats(self, mean: Tensor, var: Tensor, values: int) -> None:
        """Apply the B updates that B successive `nn.BatchNorm2d` forwards would make, in closed form."""
        if self.running_mean is None or self.running_var is None or self.num_batches_tracked is None:
            return
        unbiased = var * (values / (values - 1))
        dtype = self.running_mean.dtype
        mean, unbiased = mean.to(dtype), unbiased.to(dtype)
        if self.sync_running_stats and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            mean, unbiased = _gather_in_rank_order(mean, unbiased)
        episodes = mean.shape[0]
        if self.momentum is None:
            seen = int(self.num_batches_tracked)  # a host sync, as nn.BatchNorm2d's momentum=None also needs
            # Cumulative average: r_{t+B} = (t r_t + sum_j stat_j) / (t + B).
            decay = seen / (seen + episodes)
            coefficients = torch.full((episodes,), 1.0 / (seen + episodes), dtype=dtype, device=mean.device)
        else:
            # r <- (1-m)^B r + sum_j m (1-m)^(B-1-j) stat_j, episode j = 0 being applied first.
            m = self.momentum
            decay = (1.0 - m) ** episodes
            exponents = torch.arange(episodes - 1, -1, -1, dtype=dtype, device=mean.device)
            coefficients = m * (1.0 - m) ** exponents
        self.running_mean.mul_(decay).add_(coefficients @ mean)
        self.running_var.mul_(decay).add_(coefficients @ unbiased)
        self.num_batches_tracked.add_(episodes)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}, eval_batch_norm={self.eval_batch_norm!r}, "
            f"sync_running_stats={self.sync_running_stats}"
        )


def _variance(invstd: Tensor, eps: float) -> Tensor:
    """The biased variance behind a batch norm's saved ``1 / sqrt(var + eps)`` (in float64: no cancellation)."""
    return (invstd.double().pow(-2) - eps).clamp_min(0).to(invstd.dtype)


@contextmanager
def deferred_running_stats(module: nn.Module) -> Iterator[None]:
    """Inside, the training batch norms of ``module`` keep their episodes' statistics; on leaving, each updates its
    running buffers once, with all of them in the order they came, as if the episodes had been forwarded together.

    A backbone that embeds a batch one episode at a time (on a CPU) wraps its loop in this, so the buffers and the
    DDP gather (one per layer and step, in the global batch order) are those of the batched forward. Nothing is
    updated if the block raises.
    """
    norms = [m for m in module.modules() if isinstance(m, EpisodicBatchNorm2d) and m._pending is None]
    for norm in norms:
        norm._pending = []
    try:
        yield
        for norm in norms:
            pending = norm._pending
            if pending:
                values = {v for _, _, v in pending}
                if len(values) != 1:
                    raise ValueError(f"episodes of different sizes ({sorted(values)}) in one batch")
                means, variances, _ = zip(*pending, strict=True)
                norm._pending = None
                norm._update_running_stats(torch.cat(means), torch.cat(variances), values.pop())
    finally:
        for norm in norms:
            norm._pending = None


def _gather_in_rank_order(mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
    """All ranks' `[B_local, C]` statistics concatenated in rank order (equal `B_local` on every rank)."""
    local = torch.cat([mean, var], dim=1).contiguous()
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return torch.cat(gathered).chunk(2, dim=1)  # type: ignore[return-value]


def set_eval_batch_norm(module: nn.Module, mode: EvalBatchNorm) -> int:
    """Choose the evaluation statistics of every `EpisodicBatchNorm2d` inside `module`.

    docs/method.md's `eval_batch_norm` option: `"running"` (the running buffers, for ProtoNet/FEAT) or
    `"episode"` (the episode's own statistics, buffers untouched; what modules without running buffers,
    as in MAML/ANIL, always do).

    Args:
        module: Any module; its episodic batch norms are changed in place.
        mode: `"running"` or `"episode"`.

    Returns:
        The number of batch-norm modules set (0 means the module has none).

    Raises:
        ValueError: If `mode` is unknown.
    """
    mode = _check_eval_batch_norm(mode)
    norms = [m for m in module.modules() if isinstance(m, EpisodicBatchNorm2d)]
    for norm in norms:
        norm.eval_batch_norm = mode
    return len(norms)
