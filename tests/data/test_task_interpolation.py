"""Task interpolation (MLTI): the CutMix of two episodes checked by hand, the plan a pure function of (seed, step,
position), the partner rule, the labels, 1 process against 2 (the streams tensor for tensor, and a real DDP fit),
resume, evaluation never mixed, refused arguments, and the command line with the shipped config."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import Callback
from scipy import stats

from lightning_episodes import ProtoNet
from lightning_episodes.data import (
    Episode,
    EpisodicDataModule,
    NoDiversityTasksPerBatch,
    TaskInterpolation,
    cutmix,
    partner_position,
)
from lightning_episodes.data.interpolation import box_lambda, cutmix_box
from tests.callbacks.helpers import killed_and_resumed
from tests.helpers import tiny_datamodule, tiny_trainer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "regularization" / "task_interpolation.yaml"
CPU = torch.device("cpu")


# -- the pure maths, by hand --------------------------------------------------------------------------------------
def constant(*values: float, size: int = 4) -> torch.Tensor:
    """``[1, len(values), 1, size, size]``: one episode whose image ``i`` is the constant ``values[i]``."""
    return torch.tensor(values).view(1, -1, 1, 1, 1).expand(1, len(values), 1, size, size).clone()


def test_cutmix_pastes_the_box_from_the_partners_permuted_class() -> None:
    # 2 ways, 1 image a class: the first episode's classes are 10 and 11, the partner's 20 and 21; π = (1, 0)
    first, partner = constant(10.0, 11.0), constant(20.0, 21.0)
    mixed = cutmix(first, partner, torch.tensor([[1, 0]]), torch.tensor([[1, 0, 3, 2]]))  # rows 1-2, columns 0-1
    assert mixed.shape == (1, 2, 1, 4, 4)
    assert mixed[0, 0, 0].tolist() == [
        [10, 10, 10, 10],
        [21, 21, 10, 10],
        [21, 21, 10, 10],
        [10, 10, 10, 10],
    ]
    assert mixed[0, 1, 0].tolist() == [
        [11, 11, 11, 11],
        [20, 20, 11, 11],
        [20, 20, 11, 11],
        [11, 11, 11, 11],
    ]
    assert torch.equal(first, constant(10.0, 11.0)), "the inputs are left alone"


def test_cutmix_keeps_the_position_within_the_class_and_each_episodes_box() -> None:
    # 2 episodes, 3 ways, 2 images a class; the partner's image k of class c is 100 (b + 1) + 10 c + k
    first = torch.zeros(2, 6, 1, 3, 3)
    codes = [[100 * (b + 1) + 10 * c + k for c in range(3) for k in range(2)] for b in range(2)]
    partner = torch.tensor(codes, dtype=torch.float32).view(2, 6, 1, 1, 1).expand(2, 6, 1, 3, 3)
    permutation = torch.tensor([[2, 0, 1], [0, 1, 2]])
    boxes = torch.tensor([[0, 0, 1, 1], [1, 1, 3, 3]])  # episode 0: pixel (0, 0); episode 1: rows 1-2, columns 1-2
    mixed = cutmix(first, partner, permutation, boxes)
    # episode 0: class 0 takes the partner's class 2, class 1 its class 0, class 2 its class 1, image for image
    assert mixed[0, :, 0, 0, 0].tolist() == [120, 121, 100, 101, 110, 111]
    assert mixed[0, :, 0].flatten(1)[:, 1:].abs().sum() == 0, "nothing outside the box"
    assert mixed[1, :, 0, 2, 2].tolist() == [200, 201, 210, 211, 220, 221]
    assert mixed[1, :, 0, 1:, 1:].flatten(1).min(1).values.tolist() == [200, 201, 210, 211, 220, 221]
    assert mixed[1, :, 0, 0, :].abs().sum() == 0
    assert mixed[1, :, 0, :, 0].abs().sum() == 0


def test_an_empty_box_keeps_the_episode_and_a_full_one_takes_the_partner() -> None:
    first, partner = constant(1.0, 2.0, size=5), constant(7.0, 8.0, size=5)
    assert torch.equal(cutmix(first, partner, torch.tensor([[1, 0]]), torch.zeros(1, 4, dtype=torch.long)), first)
    full = cutmix(first, partner, torch.tensor([[1, 0]]), torch.tensor([[0, 0, 5, 5]]))
    assert torch.equal(full, constant(8.0, 7.0, size=5))


def test_cutmix_refuses_shapes_that_do_not_fit() -> None:
    first = constant(1.0, 2.0)
    with pytest.raises(ValueError, match="must be equal"):
        cutmix(first, constant(1.0, 2.0, size=3), torch.tensor([[1, 0]]), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="permutation"):
        cutmix(first, first, torch.tensor([[2, 1, 0]]), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="boxes"):
        cutmix(first, first, torch.tensor([[1, 0]]), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize(
    ("lam", "centre", "size", "box"),
    [
        (0.75, (4, 4), 8, (2, 2, 6, 6)),  # sides int(8 * 0.5) = 4: area 16 / 64 = 1 - λ
        (0.75, (0, 0), 8, (0, 0, 2, 2)),  # clipped at the corner: a quarter of it remains
        (0.75, (7, 3), 8, (5, 1, 8, 5)),  # clipped at the bottom
        (0.0, (4, 4), 8, (0, 0, 8, 8)),  # the whole image
        (1.0, (3, 3), 8, (3, 3, 3, 3)),  # empty
        (0.5, (2, 2), 5, (1, 1, 3, 3)),  # int(5 * 0.707) = 3, 3 // 2 = 1 on each side: the reference's 2 x 2
    ],
)
def test_the_box_is_cutmixs(lam: float, centre: tuple[int, int], size: int, box: tuple[int, ...]) -> None:
    assert cutmix_box(lam, *centre, size, size) == box


def test_the_effective_lambda_is_recomputed_from_the_clipped_box() -> None:
    boxes = torch.tensor([[2, 2, 6, 6], [0, 0, 2, 2], [0, 0, 8, 8], [3, 3, 3, 3]])
    assert box_lambda(boxes, 8, 8).tolist() == [1 - 16 / 64, 1 - 4 / 64, 0.0, 1.0]


# -- the plan -------------------------------------------------------------------------------------------------------
def plan(interpolation: TaskInterpolation, step: int, positions: list[int], seed: int = 0, size: int = 4) -> Any:
    return interpolation.plan(seed, step, positions, size, ways=5, height=16, width=16)


def rows(result: Any, i: int) -> list[Any]:
    return [field[i].tolist() for field in result]


def test_the_plan_is_a_pure_function_of_seed_step_and_position() -> None:
    mlti = TaskInterpolation()
    whole = plan(mlti, 7, list(range(8)), size=8)
    for j in range(8):
        assert rows(plan(mlti, 7, [j], size=8), 0) == rows(whole, j), j
    assert rows(plan(mlti, 7, [5, 2], size=8), 0) == rows(whole, 5)
    assert rows(plan(TaskInterpolation(), 7, list(range(8)), size=8), 3) == rows(whole, 3), "a new instance: the same"
    for other in (plan(mlti, 8, list(range(8)), size=8), plan(mlti, 7, list(range(8)), seed=1, size=8)):
        assert other.lam.tolist() != whole.lam.tolist()


@pytest.mark.parametrize("size", [1, 4, 5])
def test_probability_one_always_takes_the_next_position_wrapping_at_the_end(size: int) -> None:
    result = plan(TaskInterpolation(probability=1.0), 3, list(range(2 * size)), size=size)
    assert result.mixed.all()
    expected = [(j + 1) % size for j in range(size)] + [size + (j + 1) % size for j in range(size)]
    assert result.partners.tolist() == expected == [partner_position(j, size) for j in range(2 * size)]
    assert (result.support_boxes != 0).any()


def test_probability_zero_mixes_nothing() -> None:
    result = plan(TaskInterpolation(probability=0.0), 3, list(range(4)))
    assert result.partners.tolist() == [0, 1, 2, 3]
    assert not result.mixed.any()
    assert result.lam.tolist() == [1.0] * 4
    assert result.support_boxes.abs().sum() == result.query_boxes.abs().sum() == 0
    assert torch.equal(result.permutations, torch.arange(5).expand(4, 5))


def test_the_draws_follow_their_laws() -> None:
    """Over many episodes: mixed with probability 1/2, λ ~ Beta(2, 2) (scipy's), π a permutation, each box's area
    1 - λ before clipping, and its centre uniform over the image."""
    mlti = TaskInterpolation()
    result = TaskInterpolation().plan(0, 0, list(range(4000)), 4000, ways=5, height=84, width=84)
    share = float(result.mixed.double().mean())
    assert abs(share - 0.5) < 4 * math.sqrt(0.25 / 4000)
    lam = result.lam[result.mixed].numpy()
    assert stats.kstest(lam, stats.beta(mlti.alpha, mlti.beta).cdf).pvalue > 1e-3
    assert torch.equal(result.permutations.sort(dim=1).values, torch.arange(5).expand(4000, 5))
    assert (result.permutations[result.mixed] != torch.arange(5)).any(dim=1).double().mean() > 0.9
    # boxes away from the borders are unclipped: their side is 2 * (int(84 sqrt(1 - λ)) // 2)
    boxes = result.support_boxes[result.mixed]
    side = 2 * ((84 * torch.sqrt(1 - result.lam[result.mixed])).long() // 2)
    inner = (boxes[:, 0] > 0) & (boxes[:, 2] < 84)
    assert torch.equal((boxes[:, 2] - boxes[:, 0])[inner], side[inner])
    centres = (boxes[:, 0] + boxes[:, 2]) / 2
    assert abs(float(centres[inner].mean()) - 42) < 3
    assert not torch.equal(result.support_boxes, result.query_boxes), "another box for the queries"


# -- the data module ------------------------------------------------------------------------------------------------
def attach(dm: EpisodicDataModule, world_size: int = 1, rank: int = 0, start: int = 0, training: bool = True) -> Any:
    """``dm`` set up for fitting under a stand-in Trainer of ``world_size`` processes at ``rank``, global step
    ``start``, in its training (or evaluation) loop."""
    dm.trainer = SimpleNamespace(  # type: ignore[assignment]
        world_size=world_size,
        global_rank=rank,
        global_step=start,
        training=training,
        lightning_module=SimpleNamespace(dtype=torch.float32),
        strategy=SimpleNamespace(root_device=CPU),
        callbacks=[],
    )
    dm.setup("fit")
    return dm


def delivered(dm: EpisodicDataModule, loader: Any, count: int) -> list[Episode]:
    """The first ``count`` batches of ``loader`` as the model receives them (the data module's transfer hooks)."""
    out = []
    for batch, _ in zip(loader, range(count), strict=False):
        out.append(dm.on_after_batch_transfer(dm.on_before_batch_transfer(batch, 0), 0))
    return out


def training_batches(dm: EpisodicDataModule, count: int) -> list[Episode]:
    return delivered(dm, dm.train_dataloader(), count)


def same(a: Episode, b: Episode) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in [
            (a.support, b.support),
            (a.query, b.query),
            (a.support_labels, b.support_labels),
            (a.query_labels, b.query_labels),
            *zip(vars(a.identity).values(), vars(b.identity).values(), strict=True),
        ]
    )


def test_every_mixed_image_is_the_first_episodes_outside_the_box_and_the_partners_inside() -> None:
    """Checked pixel block by pixel block against the unmixed episodes (which the data module gives without it),
    for the step's batch and for positions past it (resampling's candidates pair within their block)."""
    mlti = TaskInterpolation(probability=1.0)
    dm, plain = attach(tiny_datamodule(task_interpolation=mlti)), attach(tiny_datamodule())
    for positions in (list(range(4)), list(range(4, 8))):
        mixed = dm.training_episodes(5, positions, CPU)
        pool = plain.training_episodes(5, range(8), CPU)
        result = mlti.plan(0, 5, positions, 4, 5, 16, 16)
        for i, j in enumerate(positions):
            partner = int(result.partners[i])
            assert partner == partner_position(j, 4)
            for images, first, other, box in (
                (mixed.support[i], pool.support[j], pool.support[partner], result.support_boxes[i]),
                (mixed.query[i], pool.query[j], pool.query[partner], result.query_boxes[i]),
            ):
                top, left, bottom, right = box.tolist()
                assert bottom > top
                assert right > left
                per_class = len(images) // 5
                for c in range(5):
                    source = int(result.permutations[i, c])
                    for k in range(per_class):
                        image, expected = images[c * per_class + k].clone(), first[c * per_class + k].clone()
                        inside = other[source * per_class + k][:, top:bottom, left:right]
                        assert torch.equal(image[:, top:bottom, left:right], inside)
                        image[:, top:bottom, left:right] = expected[:, top:bottom, left:right] = 0
                        assert torch.equal(image, expected), "outside the box: the first episode's pixels"


def test_labels_and_identities_stay_the_first_episodes() -> None:
    mixed = training_batches(attach(tiny_datamodule(task_interpolation=TaskInterpolation(probability=1.0))), 3)
    for a, b in zip(mixed, training_batches(attach(tiny_datamodule()), 3), strict=True):
        assert torch.equal(a.support_labels, b.support_labels)
        assert torch.equal(a.query_labels, b.query_labels)
        assert all(torch.equal(x, y) for x, y in zip(vars(a.identity).values(), vars(b.identity).values(), strict=True))
        assert not torch.equal(a.support, b.support)


def test_probability_zero_is_the_plain_stream_bit_for_bit() -> None:
    dm = attach(tiny_datamodule(task_interpolation=TaskInterpolation(probability=0.0), augment=True))
    plain = attach(tiny_datamodule(augment=True))
    assert all(same(a, b) for a, b in zip(training_batches(dm, 3), training_batches(plain, 3), strict=True))


def test_evaluation_episodes_are_never_mixed() -> None:
    mlti = TaskInterpolation(probability=1.0)
    dm, plain = attach(tiny_datamodule(task_interpolation=mlti), training=False), attach(tiny_datamodule())
    for loader in ("val_dataloader", "test_dataloader"):
        ours = delivered(dm, getattr(dm, loader)(), 100)
        theirs = [plain.assemble(batch) for batch in getattr(plain, loader)()]
        assert len(ours) == len(theirs) > 0
        assert all(same(a, b) for a, b in zip(ours, theirs, strict=True))
    # outside the training loop a training batch is not mixed either; assemble() never mixes
    assert same(training_batches(dm, 1)[0], plain.assemble(next(iter(plain.train_dataloader()))))
    dm.trainer.training = True  # type: ignore[union-attr]
    assert same(dm.assemble(next(iter(dm.train_dataloader()))), plain.assemble(next(iter(plain.train_dataloader()))))


#: what changes where the batches are built: augmentation, a device cache, a task sampler, dataloader workers
STREAMS: dict[str, dict[str, Any]] = {
    "plain": {},
    "half": {"probability": 0.5},
    "augment": {"augment": True},
    "device_cache": {"device_cache": True},
    "task_sampler": {"task_sampler": NoDiversityTasksPerBatch()},
    "workers": {"num_workers": 2},
}


def _module(case: str, **overrides: Any) -> EpisodicDataModule:
    options = dict(STREAMS[case])
    mlti = TaskInterpolation(probability=options.pop("probability", 1.0))
    return tiny_datamodule(task_interpolation=mlti, **{**options, **overrides})


@pytest.mark.parametrize("case", list(STREAMS))
def test_two_processes_hold_the_slices_of_one_process_tensor_for_tensor(case: str) -> None:
    """Every rank's last episode is mixed with the next rank's first (probability 1): rebuilt from its identity, the
    same tensors as in one process; with a task sampler that identity is the sampler's choice for its position."""
    single = attach(_module(case, episodes_per_batch=8))
    ranks = [attach(_module(case, episodes_per_batch=8), world_size=2, rank=r) for r in range(2)]
    whole = training_batches(single, 4)
    slices = [training_batches(dm, 4) for dm in ranks]
    for step, batch in enumerate(whole):
        for rank, local in enumerate(slices):
            assert same(local[step], batch[rank * 4 : (rank + 1) * 4]), (step, rank)
    if case == "task_sampler":  # the sampler's choice: all 8 episodes of a step share one class set
        assert all(len({tuple(sorted(c)) for c in batch.identity.classes.tolist()}) == 1 for batch in whole)


def test_a_stream_started_at_step_s_holds_the_mixed_episodes_of_the_stream_from_zero() -> None:
    for case in ("half", "augment"):
        from_zero = attach(_module(case))
        resumed = attach(_module(case), start=5)
        expected = training_batches(from_zero, 8)[5:]
        assert all(same(a, b) for a, b in zip(training_batches(resumed, 3), expected, strict=True))


# -- arguments ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"probability": -0.1}, r"task_interpolation.probability must be in \[0, 1\], got -0.1"),
        ({"probability": 1.5}, r"task_interpolation.probability must be in \[0, 1\], got 1.5"),
        ({"probability": True}, r"task_interpolation.probability must be in \[0, 1\], got True"),
        ({"probability": "0.5"}, r"task_interpolation.probability must be in \[0, 1\], got '0.5'"),
        ({"alpha": 0.0}, r"task_interpolation.alpha must be a finite number > 0, got 0.0"),
        ({"alpha": math.inf}, r"task_interpolation.alpha must be a finite number > 0, got inf"),
        ({"beta": -2}, r"task_interpolation.beta must be a finite number > 0, got -2"),
        ({"beta": math.nan}, r"task_interpolation.beta must be a finite number > 0, got nan"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$") as error:
        TaskInterpolation(**options)
    assert "\n" not in str(error.value)


def test_the_data_module_takes_an_instance_or_its_record_and_refuses_anything_else() -> None:
    mlti = TaskInterpolation(probability=0.25, alpha=1.0)
    record = {
        "class_path": "lightning_episodes.data.TaskInterpolation",
        "init_args": {"probability": 0.25, "alpha": 1.0},
    }
    assert mlti.config() == {**record, "init_args": {**record["init_args"], "beta": 2.0}}
    assert tiny_datamodule(task_interpolation=record).task_interpolation == mlti
    with pytest.raises(ValueError, match=r"^data.task_interpolation must be a TaskInterpolation, got str$"):
        tiny_datamodule(task_interpolation="TaskInterpolation()")
    with pytest.raises(ValueError, match=r"^data.task_interpolation: class_path 'os.system' is not "):
        tiny_datamodule(task_interpolation={"class_path": "os.system", "init_args": {}})


def test_the_hyperparameters_keep_its_class_path_and_init_args_and_plain_runs_keep_theirs() -> None:
    dm = tiny_datamodule(task_interpolation=TaskInterpolation(probability=0.5))
    expected = TaskInterpolation().config()
    assert dm.hparams["task_interpolation"] == dm.hparams_initial["task_interpolation"] == expected
    assert yaml.safe_load(yaml.safe_dump(dict(dm.hparams)))["task_interpolation"] == expected, "plain values"
    assert "task_interpolation" not in tiny_datamodule().hparams


# -- real fits ------------------------------------------------------------------------------------------------------
class Probe(Callback):
    """Per process and step: the batch the model trained on, and the gradient after DDP's all-reduce."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.batches: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.grads: dict[int, torch.Tensor] = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, *args: Any) -> None:
        self.batches[trainer.global_step] = (batch.support.clone(), batch.query.clone())

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        grads = [p.grad.flatten() for p in pl_module.parameters() if p.grad is not None]
        self.grads[trainer.global_step] = torch.cat(grads).detach().clone()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        name = f"world{trainer.world_size}-rank{trainer.global_rank}.pt"
        torch.save({"batches": self.batches, "grads": self.grads}, self.folder / name)


@pytest.mark.slow
def test_a_two_process_fit_trains_on_the_mixed_batch_of_one_process(tmp_path: Path) -> None:
    def run(devices: int) -> list[dict[str, Any]]:
        pl.seed_everything(0)
        # float64: the two processes' convolutions then round alike, so what remains is the mixing (see test_ddp.py)
        trainer = tiny_trainer(
            devices=devices, max_steps=3, limit_val_batches=0, callbacks=[Probe(tmp_path)], precision="64-true"
        )
        dm = tiny_datamodule(task_interpolation=TaskInterpolation(probability=1.0))
        trainer.fit(ProtoNet(backbone_options={"hidden": 8}, image_size=16), dm)
        return [torch.load(tmp_path / f"world{devices}-rank{r}.pt", weights_only=True) for r in range(devices)]

    (single,), double = run(1), run(2)
    assert sorted(single["batches"]) == [0, 1, 2]
    for step, (support, query) in single["batches"].items():
        assert torch.equal(torch.cat([rank["batches"][step][0] for rank in double]), support)
        assert torch.equal(torch.cat([rank["batches"][step][1] for rank in double]), query)
        assert torch.equal(double[0]["grads"][step], double[1]["grads"][step])
        torch.testing.assert_close(double[0]["grads"][step], single["grads"][step], rtol=1e-10, atol=1e-12)


class Batches(Callback):
    """The support images each training step trained on."""

    def __init__(self) -> None:
        self.support: dict[int, torch.Tensor] = {}

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, *args: Any) -> None:
        self.support[trainer.global_step] = batch.support.clone()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_a_killed_and_resumed_fit_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    straight, resumed, expected, state = killed_and_resumed(
        tmp_path, lambda: tiny_datamodule(task_interpolation=TaskInterpolation()), Batches
    )
    assert sorted(resumed.support) == [3, 4, 5]
    assert all(torch.equal(support, straight.support[step]) for step, support in resumed.support.items())
    assert all(torch.equal(value, expected[key]) for key, value in state.items())
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["datamodule_hyper_parameters"]
    assert saved["task_interpolation"] == TaskInterpolation().config()


class Selections(Callback):
    """Each step's resampling record and the difficulties the training step computed on the episodes it chose."""

    def __init__(self, weighting: Any) -> None:
        self.weighting = weighting
        self.records: list[Any] = []
        self.trained: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any) -> None:
        self.records.append(self.weighting.last_selection)
        self.trained.append(outputs["difficulties"].detach().double().clone())


class TrainedSupport(ProtoNet):
    """Keeps the support images of every batch it trains on (the forwards with gradients)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trained_support: list[torch.Tensor] = []

    def episode_losses(self, batch: Episode) -> Any:
        if torch.is_grad_enabled():
            self.trained_support.append(batch.support.detach().clone())
        return super().episode_losses(batch)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:DifficultyWeightingCallback. pool=2 would bring")  # 8 warm-up episodes: expected
def test_resampling_trains_on_the_mixed_candidates_it_scored() -> None:
    """``mode="resample"`` scores mixed candidates (each block of |B| paired within itself) and trains on the same
    mixed episodes, rebuilt for the chosen positions."""
    from lightning_episodes.callbacks import DifficultyWeightingCallback

    pl.seed_everything(0)
    weighting = DifficultyWeightingCallback(mode="resample", pool=2, warmup_steps=2)
    selections = Selections(weighting)
    trainer = tiny_trainer(max_steps=5, limit_val_batches=0, callbacks=[weighting, selections])
    dm = tiny_datamodule(task_interpolation=TaskInterpolation(probability=1.0))
    model = TrainedSupport(backbone_options={"hidden": 8}, image_size=16)
    trainer.fit(model, dm)
    assert len(selections.records) == len(model.trained_support) == 5
    assert any(not torch.equal(r.selected, torch.arange(4)) for r in selections.records), "a choice past block 0"
    for step, (record, trained) in enumerate(zip(selections.records, selections.trained, strict=True)):
        torch.testing.assert_close(trained, record.difficulties[record.selected], rtol=1e-5, atol=1e-6)
        chosen = record.selected.tolist()
        assert torch.equal(model.trained_support[step], dm.training_episodes(step, chosen, CPU).support)
        unmixed = dm._unmixed_training_episodes(step, chosen, CPU, torch.float32).support
        assert not torch.equal(model.trained_support[step], unmixed)


# -- the command line -----------------------------------------------------------------------------------------------
def test_the_configs_command_lists_the_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_episodes.commands.configs import main

    assert main([]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert "regularization/task_interpolation" in listed


def test_the_command_line_takes_it_by_class_path() -> None:
    from lightning_episodes.cli import main

    args = ["--model", "ProtoNet", "--seed_everything", "0", "--data.dataset", "tiny", "--data.image_size", "16"]
    args += ["--trainer.logger", "false"]
    cli = main([*args, "--data.task_interpolation", "lightning_episodes.data.TaskInterpolation"], run=False)
    assert cli.datamodule.task_interpolation == TaskInterpolation()
    changed = [*args, "--data.task_interpolation", "TaskInterpolation", "--data.task_interpolation.probability", "1"]
    assert main(changed, run=False).datamodule.task_interpolation == TaskInterpolation(probability=1.0)
    assert main(args, run=False).datamodule.task_interpolation is None


@pytest.mark.slow
def test_a_glyphs_fit_with_the_shipped_config_records_it(tmp_path: Path) -> None:
    from lightning_episodes.analysis.protocols import protocol_of
    from lightning_episodes.cli import main
    from lightning_episodes.evaluation.scoring import checkpoint_datamodule

    quickstart = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    trainer = quickstart["trainer"]
    trainer["default_root_dir"] = trainer["logger"]["init_args"]["save_dir"] = str(tmp_path)
    trainer["callbacks"][0]["init_args"]["dirpath"] = str(tmp_path / "checkpoints")
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(quickstart))
    small = ["--trainer.max_steps=3", "--trainer.val_check_interval=3", "--trainer.enable_progress_bar=false"]
    small += ["--data.val_episodes=4", "--data.test_episodes=4", "--data.eval_episodes_per_batch=4"]
    small += ["--model.backbone_options.hidden=8", "--test_after_fit=true"]
    main(["fit", "--config", str(tmp_path / "quickstart.yaml"), "--config", str(CONFIG), *small])

    (record_path,) = tmp_path.rglob("test_results.json")
    record = json.loads(record_path.read_text())
    assert record["episodes"] == 4
    config = yaml.safe_load((record_path.parent / "config.yaml").read_text())
    assert config["data"]["init_args"]["task_interpolation"] == TaskInterpolation().config()
    protocol = dict(protocol_of(config, record))
    assert protocol["data.task_interpolation"] == "TaskInterpolation()"
    assert protocol["data.task_interpolation.probability"] == "0.5"
    last = tmp_path / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)["datamodule_hyper_parameters"]
    assert saved["task_interpolation"] == TaskInterpolation().config()
    assert checkpoint_datamodule(last).task_interpolation == TaskInterpolation()
