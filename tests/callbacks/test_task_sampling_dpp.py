"""The DPP task samplers through the real Trainer: the class features they sample from are the model's (dynamic) or
the reference's (static), computed by hand image by image; what cannot work is refused before training."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from lightning_episodes import ProtoNet
from lightning_episodes.algorithms.loading import load_episodic_module
from lightning_episodes.callbacks import TaskSamplerFeedback
from lightning_episodes.data import DynamicDPP, EpisodicDataModule, StaticDPP, keep_per_class
from lightning_episodes.testing.tiny import decode_rows
from tests.callbacks.test_task_sampling import Served
from tests.helpers import tiny_datamodule, tiny_trainer


def _by_hand(model: torch.nn.Module, datamodule: EpisodicDataModule, count: int) -> torch.Tensor:
    """Each training class's mean backbone feature over the first ``count`` of its images in the data seed's order,
    forwarding one image at a time in eval mode (running batch-norm statistics: images do not interact)."""
    data = datamodule.data
    assert data is not None
    assert datamodule.assembler is not None
    model.eval()
    rows_of = keep_per_class(data.labels, data.splits["train"], count, datamodule.seed)
    features = []
    with torch.no_grad():
        for class_id in data.splits["train"]:
            rows = rows_of[data.labels[rows_of] == class_id]
            images = data.images[rows].float() * datamodule.assembler.scale + datamodule.assembler.shift
            features.append(torch.stack([model.backbone(image[None, None])[0, 0] for image in images]).mean(0))
    return torch.stack(features).double()


def _fit(sampler: DynamicDPP | StaticDPP, model: ProtoNet, steps: int = 3, **data: object) -> tuple[Served, object]:
    served, datamodule = Served(), tiny_datamodule(task_sampler=sampler, **data)
    trainer = tiny_trainer(max_steps=steps, limit_val_batches=0, callbacks=[TaskSamplerFeedback(), served])
    trainer.fit(model, datamodule)
    return served, datamodule


def test_class_images_are_each_classs_first_images_in_the_data_seeds_order_within_a_scarce_split() -> None:
    datamodule = tiny_datamodule(train_images_per_class=6)
    datamodule.setup("fit")
    assert datamodule.data is not None
    assert datamodule.assembler is not None
    images = datamodule.class_images(3, dtype=torch.float64)
    assert images.shape == (12, 3, 1, 16, 16)
    raw = ((images - datamodule.assembler.shift.double()) / datamodule.assembler.scale.double()).round().to(torch.uint8)
    rows = decode_rows(raw)
    labels = datamodule.data.labels
    assert labels[rows].tolist() == [[c] * 3 for c in datamodule.data.splits["train"]]
    scarce = keep_per_class(labels, datamodule.data.splits["train"], 6, datamodule.seed)
    assert bool(torch.isin(rows, scarce).all())  # the training images of the scarce split, nothing else
    with pytest.raises(ValueError, match="images_per_class=7 exceeds the 6 training images of the smallest"):
        datamodule.class_images(7)


def test_dynamic_dpp_samples_from_the_features_of_the_model_being_trained() -> None:
    """Features asked for after step 1 (the end of a 2-step warm-up) are the trained model's then: the last model
    of a 2-step fit; step 2's classes are the k-DPP's draw from them."""
    pl.seed_everything(0)
    sampler, model = DynamicDPP(warmup_steps=2, refresh_every=100, images_per_class=3), ProtoNet(image_size=16)
    served, datamodule = _fit(sampler, model, steps=2)
    assert sampler.features is not None
    torch.testing.assert_close(sampler.features, _by_hand(model, datamodule, 3), rtol=1e-4, atol=1e-5)
    more = _fit(sampler, ProtoNet(image_size=16), steps=3)[0]  # a new fit: its features are computed again
    assert torch.equal(more.steps[2][1], sampler.classes(0, 2, range(4)))


def test_static_dpp_samples_from_the_reference_models_features_from_the_first_step(tmp_path: Path) -> None:
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=3, limit_val_batches=0)
    trainer.fit(ProtoNet(image_size=16), tiny_datamodule())
    trainer.save_checkpoint(tmp_path / "reference.ckpt")
    sampler = StaticDPP(tmp_path / "reference.ckpt", images_per_class=2)
    trained = ProtoNet(image_size=16)
    served, datamodule = _fit(sampler, trained)
    reference = load_episodic_module(tmp_path / "reference.ckpt")
    assert sampler.features is not None
    torch.testing.assert_close(sampler.features, _by_hand(reference, datamodule, 2), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(sampler.features, _by_hand(trained, datamodule, 2), rtol=1e-2)
    for step, classes, *_ in served.steps:
        assert torch.equal(classes, sampler.classes(0, step, range(4)))  # ids = positions for tiny's classes


@pytest.mark.parametrize(
    ("sampler", "model", "error", "message"),
    [
        (lambda: StaticDPP("missing.ckpt"), {}, FileNotFoundError, "reference_checkpoint='missing.ckpt' does not"),
        (lambda: DynamicDPP(), {"backbone_options": {"hidden": 2}}, ValueError, "at least data.ways=5 dimensions"),
        (lambda: DynamicDPP(images_per_class=11), {}, ValueError, "images_per_class=11 exceeds the 10 training"),
    ],
    ids=["missing-reference", "too-few-dimensions", "too-many-images"],
)
def test_what_cannot_give_class_features_is_refused_before_training(
    sampler: object, model: dict, error: type[Exception], message: str
) -> None:
    served = Served()
    trainer = tiny_trainer(max_steps=2, limit_val_batches=0, callbacks=[TaskSamplerFeedback(), served])
    with pytest.raises(error, match=message):
        trainer.fit(ProtoNet(image_size=16, **model), tiny_datamodule(task_sampler=sampler()))  # type: ignore[operator]
    assert served.steps == []
