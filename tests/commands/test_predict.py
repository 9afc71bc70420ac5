"""Prediction on image folders: real PNG files, every algorithm, the Python API and the console script.

The reference is computed apart from :mod:`lightning_episodes.inference`: the images are decoded with Pillow
here and normalised with the training data's statistics in float64, the episode is built with
``Episode.from_tensors`` and scored by the model's evaluation (``episode_losses`` in evaluation mode, the loss
being the mean query cross-entropy), and for ProtoNet by hand from the backbone's features.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image

from lightning_episodes import ANIL, FEAT, MAML, Episode, EpisodicModule, ProtoNet, load_episodic_module, predict
from lightning_episodes.algorithms.loading import CLI_INSTANTIATORS
from lightning_episodes.models import set_eval_batch_norm
from tests.helpers import tiny_datamodule, tiny_trainer

BIN = Path(sys.executable).parent
WAYS, SHOTS, QUERIES = 3, 2, 2
TINY_MEAN, TINY_STD = 0.5, 0.25  # lightning_episodes.testing's tiny dataset


def _trained(tmp_path: Path, model: EpisodicModule, name: str) -> Path:
    """A checkpoint written by a 2-step fit on the tiny dataset (16 x 16 grayscale, ``WAYS`` ways)."""
    pl.seed_everything(0)
    trainer = tiny_trainer(max_steps=2, val_check_interval=2, limit_val_batches=1)
    trainer.fit(model, tiny_datamodule(ways=WAYS, val_episodes=4))
    path = tmp_path / f"{name}.ckpt"
    trainer.save_checkpoint(path)
    return path


MODELS = {
    "protonet": lambda: ProtoNet(image_size=16, backbone_options={"hidden": 8}),
    "protonet-cosine": lambda: ProtoNet(image_size=16, backbone_options={"hidden": 8}, distance="cosine"),
    "maml": lambda: MAML(image_size=16, ways=WAYS, backbone_options={"hidden": 8}, adaptation_steps=2),
    "anil": lambda: ANIL(image_size=16, ways=WAYS, backbone_options={"hidden": 8}, adaptation_steps=2),
    "feat": lambda: FEAT(backbone="conv4", image_size=16, backbone_options={"hidden": 8}, dropout=0.1),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("checkpoints")
    return {name: _trained(folder, build(), name) for name, build in MODELS.items()}


def _write_images(root: Path, seed: int = 0) -> tuple[Path, Path, list[np.ndarray], list[np.ndarray]]:
    """``support/<class>/*.png`` (RGB, 20 x 20, ``SHOTS`` per class) and ``query/*.png`` (``QUERIES`` per class,
    named so that file-name order is class-major), drawn like the tiny dataset: a bright square per class."""
    rng = np.random.default_rng(seed)
    support, query = root / "support", root / "query"
    corners = [(1, 1), (12, 3), (5, 13)]
    arrays: dict[str, list[np.ndarray]] = {"support": [], "query": []}
    for c, (y, x) in enumerate(corners):
        (support / f"class_{'abc'[c]}").mkdir(parents=True)
        for kind, count in (("support", SHOTS), ("query", QUERIES)):
            for i in range(count):
                pixels = rng.integers(0, 150, (20, 20, 3), dtype=np.uint8)
                pixels[y : y + 6, x : x + 6] = 250
                folder = support / f"class_{'abc'[c]}" if kind == "support" else query
                folder.mkdir(exist_ok=True)
                Image.fromarray(pixels).save(folder / (f"{i}.png" if kind == "support" else f"q{c}{i}.png"))
                arrays[kind].append(pixels)
    return support, query, arrays["support"], arrays["query"]


def _reference_pixels(arrays: list[np.ndarray]) -> torch.Tensor:
    """Pillow's luminance, 16 x 16 bilinear, then (x / 255 - mean) / std in float64."""
    images = [np.asarray(Image.fromarray(a).convert("L").resize((16, 16), Image.Resampling.BILINEAR)) for a in arrays]
    x = torch.from_numpy(np.stack(images)).double()[:, None]
    return ((x / 255 - TINY_MEAN) / TINY_STD).float()


def _evaluate(module: EpisodicModule, batch: Episode) -> tuple[float, float]:
    """The model's own evaluation of an episode: (mean query cross-entropy, accuracy)."""
    module.eval()
    set_eval_batch_norm(module, module.eval_batch_norm)
    with torch.enable_grad() if module.requires_grad_in_evaluation else torch.no_grad():
        out = module.episode_losses(batch)
    return float(out.losses[0]), float(out.accuracies[0])


@pytest.mark.parametrize("name", list(MODELS))
def test_predictions_are_the_models_evaluation_of_the_same_episode(
    name: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    support_dir, query_dir, support, query = _write_images(tmp_path)
    predictions = predict(checkpoints[name], support_dir, query_dir)
    assert [p.query.name for p in predictions] == sorted(p.name for p in query_dir.iterdir())
    assert all(list(p.probabilities) == ["class_a", "class_b", "class_c"] for p in predictions)
    probabilities = torch.tensor([list(p.probabilities.values()) for p in predictions], dtype=torch.float64)
    assert torch.allclose(probabilities.sum(1), torch.ones(len(predictions), dtype=torch.float64))
    assert [p.predicted for p in predictions] == [["class_a", "class_b", "class_c"][i] for i in probabilities.argmax(1)]

    module = load_episodic_module(checkpoints[name])
    batch = Episode.from_tensors(_reference_pixels(support)[None], _reference_pixels(query)[None], WAYS)
    loss, accuracy = _evaluate(module, batch)
    labels = batch.query_labels[0]
    assert float(-probabilities[torch.arange(len(labels)), labels].log().mean()) == pytest.approx(loss, abs=1e-4)
    assert float((probabilities.argmax(1) == labels).double().mean()) == pytest.approx(accuracy)


def test_protonet_probabilities_by_hand(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """softmax(-||f(q) - c_j||^2) with c_j the mean support feature of class j (running batch-norm statistics)."""
    support_dir, query_dir, support, query = _write_images(tmp_path, seed=3)
    predictions = predict(checkpoints["protonet"], support_dir, query_dir)
    module = load_episodic_module(checkpoints["protonet"]).eval()
    with torch.no_grad():
        s = module.backbone(_reference_pixels(support)[None])[0].double()
        q = module.backbone(_reference_pixels(query)[None])[0].double()
    centres = s.view(WAYS, SHOTS, -1).mean(1)
    expected = (-(q[:, None] - centres[None]).pow(2).sum(-1)).softmax(-1)
    got = torch.tensor([list(p.probabilities.values()) for p in predictions], dtype=torch.float64)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.slow
def test_the_console_script_writes_the_csv(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    output = tmp_path / "out" / "preds.csv"
    done = subprocess.run(
        [str(BIN / "lightning-episodes"), "predict", "--ckpt_path", str(checkpoints["anil"]), "--support",
         str(support_dir), "--query", str(query_dir), "--output", str(output), "--device", "cpu"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.reader(output.open()))
    assert rows[0] == ["query", "predicted", "p(class_a)", "p(class_b)", "p(class_c)"]
    expected = predict(checkpoints["anil"], support_dir, query_dir)
    assert [Path(r[0]).name for r in rows[1:]] == [p.query.name for p in expected]
    assert [r[1] for r in rows[1:]] == [p.predicted for p in expected]
    got = np.array([[float(v) for v in r[2:]] for r in rows[1:]])
    assert np.allclose(got, [list(p.probabilities.values()) for p in expected], atol=1e-6)


def _run_predict(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "lightning-episodes"), "predict", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("empty-class", "class folder 'class_b' .* holds no image"),
        ("unequal-shots", "same number of images (shots); found class_a: 3, class_b: 2, class_c: 2"),
        ("text-file", "notes.txt is not an image file"),
        ("broken-png", "broken.png is not a readable image"),
        ("loose-file", "must hold one sub-folder per class"),
        ("one-class", "holds one class sub-folder (class_a): predict chooses between at least two"),
        ("missing-query", "query folder"),
    ],
)
def test_bad_folders_are_clear_errors(
    breakage: str, message: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    if breakage == "empty-class":
        for image in (support_dir / "class_b").iterdir():
            image.unlink()
    elif breakage == "unequal-shots":
        (support_dir / "class_a" / "extra.png").write_bytes((support_dir / "class_a" / "0.png").read_bytes())
    elif breakage == "text-file":
        (query_dir / "notes.txt").write_text("not an image")
    elif breakage == "broken-png":
        (query_dir / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    elif breakage == "one-class":
        for name in ("class_b", "class_c"):
            shutil.rmtree(support_dir / name)
    elif breakage == "loose-file":
        (support_dir / "stray.png").write_bytes((support_dir / "class_a" / "0.png").read_bytes())
    else:
        query_dir = tmp_path / "nowhere"
    with pytest.raises((ValueError, FileNotFoundError), match=message.replace("(", r"\(").replace(")", r"\)")):
        predict(checkpoints["protonet"], support_dir, query_dir)


@pytest.mark.parametrize("name", ["maml", "anil"])
def test_a_head_with_other_ways_is_a_clear_error(name: str, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    (support_dir / "class_d").mkdir()
    for image in (support_dir / "class_a").iterdir():
        (support_dir / "class_d" / image.name).write_bytes(image.read_bytes())
    with pytest.raises(ValueError, match=r"head has 3 outputs .* exactly 3 class sub-folders, it has 4"):
        predict(checkpoints[name], support_dir, query_dir)
    # ProtoNet takes any number of ways and shots
    assert len(predict(checkpoints["protonet"], support_dir, query_dir)[0].probabilities) == 4


@pytest.mark.slow
def test_console_errors_are_one_line_with_status_2(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    (query_dir / "notes.txt").write_text("not an image")
    done = _run_predict("--ckpt_path", str(checkpoints["protonet"]), "--support", str(support_dir), "--query",
                        str(query_dir))  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "notes.txt is not an image file" in done.stderr
    done = _run_predict("--ckpt_path", str(tmp_path / "missing.ckpt"), "--support", str(support_dir), "--query",
                        str(query_dir))  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "missing.ckpt does not exist" in done.stderr


# -- devices, checkpoints that name other code, paths the OS refuses ------------------------------------------
def _predict_entry(checkpoint: Path, support_dir: Path, query_dir: Path, *extra: str) -> int:
    from lightning_episodes.cli import entry

    return entry(["predict", "--ckpt_path", str(checkpoint), "--support", str(support_dir), "--query",
                  str(query_dir), *extra])  # fmt: skip


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (line,) = [line for line in captured.err.splitlines() if ": error: " in line]
    return line


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_an_absent_device_is_one_line(
    device: str, checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    assert _predict_entry(checkpoints["protonet"], support_dir, query_dir, "--device", device) == 2
    kind = device.split(":")[0].upper()
    assert _one_error_line(capsys).endswith(
        f"error: --device {device}: this machine has no {kind} device (available: cpu)"
    )


def _as_saved_on_cuda(source: Path, target: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``source`` saved again with every tensor's storage tagged ``cuda:0`` (as a GPU run writes it): torch.save
    records what ``torch.serialization.location_tag`` says."""
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(checkpoint, target)
    return target


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_a_cuda_checkpoint_predicts_on_the_cpu(
    device: str, checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = _as_saved_on_cuda(checkpoints["protonet"], tmp_path / "cuda.ckpt", monkeypatch)
    with pytest.raises(RuntimeError, match="on a CUDA device"):  # the file really asks for CUDA
        torch.load(cuda, weights_only=True)
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    output = tmp_path / "out.csv"
    assert _predict_entry(cuda, support_dir, query_dir, "--device", device, "--output", str(output)) == 0
    expected = predict(checkpoints["protonet"], support_dir, query_dir)
    rows = list(csv.reader(output.open()))[1:]
    assert [r[1] for r in rows] == [p.predicted for p in expected]


EVIL = """
import pathlib, sys
print("IMPORTED EVIL")
pathlib.Path({marker!r}).write_text("written on import")
class Model:
    pass
"""


def _evil_checkpoint(tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> tuple[Path, Path]:
    """A checkpoint naming ``le_evil_module.Model`` (in ``key``'s record), a module on ``sys.path`` that prints and
    writes a file when imported."""
    marker = tmp_path / "marker.txt"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "le_evil_module.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(modules))
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    if key == "lightning_episodes":
        checkpoint["lightning_episodes"]["class_path"] = "le_evil_module.Model"
    else:
        checkpoint["hyper_parameters"]["_class_path"] = "le_evil_module.Model"
    path = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, path)
    return path, marker


def test_a_checkpoint_naming_another_module_is_refused_before_importing_it(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    crafted, marker = _evil_checkpoint(tmp_path, checkpoints["protonet"], monkeypatch, "lightning_episodes")
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    assert _predict_entry(crafted, support_dir, query_dir, "--device", "cpu") == 2
    captured = capsys.readouterr()
    assert "IMPORTED EVIL" not in captured.out + captured.err
    assert not marker.exists()
    assert "le_evil_module" not in sys.modules
    (line,) = [line for line in captured.err.splitlines() if ": error: " in line]
    assert f"checkpoint {crafted} records the class 'le_evil_module.Model', which is not a lightning_episodes" in line
    assert "refused before importing it (if you trust the checkpoint, name its module: --allowed_modules " in line
    # named by the user: imported (and then refused as not an EpisodicModule)
    allowed = ("--device", "cpu", "--allowed_modules", "[le_evil_module]")
    assert _predict_entry(crafted, support_dir, query_dir, *allowed) == 2
    assert marker.exists()
    assert "'le_evil_module.Model', which is not an EpisodicModule" in _one_error_line(capsys)
    sys.modules.pop("le_evil_module")


@pytest.mark.parametrize("key", ["hyper_parameters", "lightning_episodes"])
def test_the_trainer_cli_refuses_it_too(
    key: str,
    checkpoints: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``test --ckpt_path``: LightningCLI would import the class the checkpoint's hyper-parameters name."""
    from lightning_episodes.cli import entry
    from tests.cli.test_checkpoints import _config

    crafted, marker = _evil_checkpoint(tmp_path, checkpoints["protonet"], monkeypatch, key)
    assert entry(["test", "--config", str(_config(tmp_path / "run")), "--ckpt_path", str(crafted)]) == 2
    captured = capsys.readouterr()
    assert "IMPORTED EVIL" not in captured.out + captured.err
    assert not marker.exists()
    assert "le_evil_module" not in sys.modules
    assert "records the class 'le_evil_module.Model'" in captured.err


#: edited fields of a checkpoint written by the CLI -> the one line that refuses it
EDITED = {
    ("hyper_parameters", "_instantiator", "os.system"): "names the instantiator 'os.system' in its hyper_parameters",
    ("hyper_parameters", "_class_path", "os.PathLike"): "and, in its hyper_parameters, 'os.PathLike': refused",
    ("datamodule_hyper_parameters", "_instantiator", "builtins.eval"): (
        "names the instantiator 'builtins.eval' in its datamodule_hyper_parameters"
    ),
    ("datamodule_hyper_parameters", "_class_path", "le_evil_data.Module"): (
        "records the class 'le_evil_data.Module', which is not a lightning_episodes algorithm"
    ),
}


@pytest.mark.parametrize("edit", list(EDITED), ids=["-".join(edit[:2]) for edit in EDITED])
def test_an_edited_instantiator_or_class_path_is_one_line_in_every_command(
    edit: tuple[str, str, str],
    checkpoints: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What LightningCLI saves (``_class_path``, ``_instantiator``, for the model and the data module), edited: predict
    and `test --ckpt_path` refuse it in one line, exit 2 (Lightning's own refusal was a 28-57 line traceback, and
    `test` ignored an edited data module)."""
    from lightning_episodes.cli import entry
    from tests.cli.test_checkpoints import _config

    section, field, value = edit
    checkpoint = torch.load(checkpoints["protonet"], map_location="cpu", weights_only=True)
    model_class = checkpoint["lightning_episodes"]["class_path"]
    checkpoint["hyper_parameters"].update(_class_path=model_class, _instantiator=sorted(CLI_INSTANTIATORS)[0])
    checkpoint["datamodule_hyper_parameters"] = {
        "_class_path": "lightning_episodes.data.EpisodicDataModule",
        "_instantiator": sorted(CLI_INSTANTIATORS)[0],
    }
    checkpoint[section][field] = value
    crafted = tmp_path / "edited.ckpt"
    torch.save(checkpoint, crafted)
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    assert _predict_entry(crafted, support_dir, query_dir, "--device", "cpu") == 2
    assert EDITED[edit] in _one_error_line(capsys)
    assert entry(["test", "--config", str(_config(tmp_path / "run")), "--ckpt_path", str(crafted)]) == 2
    assert EDITED[edit] in _one_error_line(capsys)
    assert "le_evil_data" not in sys.modules


def test_an_output_that_cannot_be_written_stops_before_predicting(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    output = blocker / "preds.csv"
    assert _predict_entry(checkpoints["protonet"], support_dir, query_dir, "--output", str(output)) == 2
    assert _one_error_line(capsys).endswith(
        f"--output {output}: the folder {blocker} cannot be written: {blocker} is a file, not a folder"
    )


@pytest.mark.parametrize("kind", ["dangling-query", "support-class-loop"])
def test_a_folder_entry_the_os_refuses_is_one_line(
    kind: str, checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    support_dir, query_dir, _, _ = _write_images(tmp_path)
    if kind == "dangling-query":
        path, reason = query_dir / "zz.png", "No such file or directory"
        path.symlink_to(tmp_path / "gone.png")
    else:
        path, reason = support_dir / "class_d", "Too many levels of symbolic links"
        path.symlink_to(path.name)
    assert _predict_entry(checkpoints["protonet"], support_dir, query_dir, "--device", "cpu") == 2
    assert _one_error_line(capsys).endswith(f"error: {path}: {reason}")
