"""The README is the contract: its commands and its Python examples run as written."""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import shutil
import site
import subprocess
import sys
import unicodedata
import venv
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def _pip_quickstart() -> tuple[str, list[str]]:
    """The README's first commands: the ``pip install`` line and the ``lightning-episodes`` commands after it."""
    lines = [line.split("#")[0].strip() for line in _blocks("bash")[0].splitlines()]
    return lines[0], [line for line in lines[1:] if line]


def _makefile_recipe(target: str) -> list[str]:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", text, flags=re.MULTILINE)
    assert match, f"Makefile has no {target} target"
    return [line.strip().replace("$(BIN)/", ".venv/bin/") for line in match.group(1).splitlines()]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert "make test " in README or "make test\n" in README
    ci = [
        line
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci == ["make test"]


def test_the_readme_is_a_front_page_of_at_most_300_lines() -> None:
    """The README says what the library is and how to start; the rest lives in docs/ (the site) and CHANGELOG.md."""
    assert len(README.splitlines()) <= 300


def _slug(heading: str) -> str:
    """The anchor of a Markdown heading, as MkDocs' ``toc`` extension (and GitHub, for these headings) makes it."""
    text = unicodedata.normalize("NFKD", re.sub(r"[`*]", "", heading)).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(markdown: str) -> set[str]:
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    return {_slug(heading) for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def test_the_readmes_links_reach_files_and_headings_that_exist() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", README, flags=re.DOTALL))
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert any(link.startswith("docs/") for link in local), "the README links the documentation's pages"
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else ROOT / "README.md"
        assert target.exists(), f"README links {link!r}: no such file"
        if anchor:
            assert anchor in _anchors(target.read_text()), f"README links {link!r}: no such heading"


def test_quickstart_commands_in_the_readme_are_what_make_quickstart_runs() -> None:
    shown = [line.strip() for block in _blocks("bash") for line in block.splitlines()]
    for command in _makefile_recipe("quickstart"):
        assert command in shown, f"README does not show the quickstart step {command!r}"


@pytest.mark.slow
def test_quickstart_runs_through_the_console_script(tmp_path: Path) -> None:
    """The README's fit + test commands, on the real glyphs data, with a few steps."""
    config = yaml.safe_load((ROOT / "configs/quickstart.yaml").read_text())
    config["trainer"]["default_root_dir"] = str(tmp_path)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path)
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(config))
    small = [
        "--trainer.max_steps=6",
        "--trainer.val_check_interval=3",
        "--data.val_episodes=20",
        "--data.test_episodes=20",
    ]
    for command in _makefile_recipe("quickstart"):
        argv = shlex.split(command.replace("configs/quickstart.yaml", str(tmp_path / "quickstart.yaml")))
        argv[0] = str(BIN / Path(argv[0]).name)
        done = subprocess.run([*argv, *small], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "test/acc" in done.stdout
    assert (tmp_path / "logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()  # the fit's; the test's: version_1


def _readme_commands() -> list[list[str]]:
    """Every ``lightning-episodes`` command of the README's bash blocks, in order, without the program's name."""
    lines = [
        line.split("#")[0].strip() for block in _blocks("bash") for line in block.replace("\\\n", " ").splitlines()
    ]
    return [shlex.split(line)[1:] for line in lines if line.startswith("lightning-episodes ")]


def _checkpoints(folder: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in folder.rglob("*.ckpt")}


def _images(support: Path, query: Path) -> None:
    """A support folder of 3 classes, 2 images each, and 3 query images (28 x 28 grey, a bright square per class)."""
    for c in range(3):
        pixels = np.zeros((28, 28), dtype=np.uint8)
        pixels[4 + 6 * c : 10 + 6 * c, 4:10] = 250
        (support / f"class_{c}").mkdir(parents=True)
        for i in range(2):
            Image.fromarray(pixels).save(support / f"class_{c}" / f"{i}.png")
        query.mkdir(exist_ok=True)
        Image.fromarray(pixels).save(query / f"q{c}.png")


@pytest.mark.slow
def test_the_readmes_commands_run_in_sequence_each_run_in_its_own_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's commands in its order, with a few steps and episodes: each fit writes into a new version folder and
    changes no other run's checkpoints; `--ckpt_path best|last` takes the run of the command's own config (not the
    newest); the checkpoint that `predict` names is the first quickstart's."""
    from lightning_episodes.cli import entry, main

    monkeypatch.chdir(tmp_path)
    small = ["--trainer.max_steps=4", "--trainer.val_check_interval=2", "--data.val_episodes=10"]
    small += ["--data.test_episodes=10", "--data.queries=5", "--trainer.enable_progress_bar=false"]
    small += ["--trainer.enable_model_summary=false"]
    logs = tmp_path / "runs" / "quickstart" / "logs"
    runs: dict[tuple[str, ...], Path] = {}  # a config (the options but --ckpt_path and --test_after_fit) -> its run
    commands = _readme_commands()
    assert [argv[0] for argv in commands] == ["fit", "test", "fit", "test", "fit", "fit", "fit", "fit", "predict"]
    for argv in commands:
        if argv[0] == "predict":
            _images(Path(argv[argv.index("--support") + 1]), Path(argv[argv.index("--query") + 1]))
            assert entry(argv) == 0
            assert Path(argv[argv.index("--ckpt_path") + 1]).absolute().parents[1] == runs[("--config", "quickstart")]
            continue
        ckpt = argv[argv.index("--ckpt_path") + 1] if "--ckpt_path" in argv else None
        options = [a for a in argv[1:] if a not in ("--ckpt_path", ckpt) and not a.startswith("--test_after_fit")]
        before = _checkpoints(logs) if logs.exists() else {}
        cli = main([*argv, *small])
        after = _checkpoints(logs)
        written = {path.parent.parent for path in after if before.get(path) != after[path]}
        if argv[0] == "fit" and ckpt is None:
            assert tuple(options) not in runs
            (runs[tuple(options)],) = written  # a new version folder
        assert written <= {runs[tuple(options)]}, argv  # no other run's checkpoints change
        if ckpt is not None:
            assert Path(cli.trainer.ckpt_path).absolute().parents[1] == runs[tuple(options)], argv
    assert len(set(runs.values())) == len(runs) == 5
    # the command of the issue: after a fit of another config, the quickstart's best is still the quickstart's
    cli = main(["validate", "--config", "quickstart", "--ckpt_path", "best", *small])
    assert Path(cli.trainer.ckpt_path).absolute().parents[1] == runs[("--config", "quickstart")] == logs / "version_0"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_python_examples_run(index: int, tmp_path: Path) -> None:
    code = _blocks("python")[index]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_readme_starts_with_pip_install_and_the_quickstart_by_name() -> None:
    install, commands = _pip_quickstart()
    assert install == "pip install ."
    assert commands == [
        "lightning-episodes fit --config quickstart",
        "lightning-episodes test --config quickstart --ckpt_path best",
    ]


@pytest.mark.slow
def test_the_pip_quickstart_from_a_built_wheel_in_an_empty_folder(tmp_path: Path) -> None:
    """Build the wheel, install it alone into a new environment (which reuses this one's installed dependencies) and
    run the README's pip quickstart, with a few steps, from an empty folder: it trains, tests and writes its records."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "lightning_episodes", source / "lightning_episodes", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "build_backend", source / "build_backend", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):  # what the build reads
        shutil.copy(ROOT / name, source / name)
    copied = sorted(path.relative_to(source) for path in source.rglob("*") if "__pycache__" not in path.parts)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-q"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    # the build happens out of the checkout (build_backend/out_of_tree.py): no build/, no *.egg-info left behind
    assert sorted(path.relative_to(source) for path in source.rglob("*") if "__pycache__" not in path.parts) == copied
    (wheel,) = (tmp_path / "dist").glob("lightning_episodes-*.whl")
    shipped = {
        f"lightning_episodes/configs/{p.relative_to(ROOT / 'configs')}" for p in (ROOT / "configs").rglob("*.yaml")
    }
    assert shipped <= set(zipfile.ZipFile(wheel).namelist())

    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    (purelib,) = env.glob("lib/python*/site-packages")
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # torch & co., not our .pth
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # no checkout on the path
    python = str(env / "bin" / "python")
    install = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, env=environ, timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    where = [python, "-c", "import lightning_episodes; print(lightning_episodes.__file__)"]
    imported = subprocess.run(where, cwd=work, env=environ, capture_output=True, text=True, check=True).stdout
    assert Path(imported.strip()).is_relative_to(purelib), imported  # the wheel's copy, not the editable checkout

    small = [
        "--trainer.max_steps=6",
        "--trainer.val_check_interval=3",
        "--data.val_episodes=20",
        "--data.test_episodes=20",
    ]
    for command in _pip_quickstart()[1]:
        argv = shlex.split(command)
        argv[0] = str(env / "bin" / argv[0])
        done = subprocess.run([*argv, *small], cwd=work, env=environ, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "test/acc" in done.stdout
    run = work / "runs" / "quickstart"
    assert (run / "logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    (record,) = run.glob("logs/version_*/test_results.json")
    assert (record.parent / "test_episodes.csv").is_file()
    assert sorted(p.name for p in work.iterdir()) == ["runs"]


#: the five-training study's comparisons that the README's and the study page's answers quote: (cell, baseline,
#: treatment, the settings in which the arms may differ)
STUDY_CELL = ROOT / "studies/scarce5/n60/glyphs_100_5w5s__protonet_cosine_conv4"
REGULARISERS_CELL = ROOT / "studies/scarce5/n60_regularisers/glyphs_100_5w5s__protonet_cosine_conv4"
REGULARISERS = {"weight_decay": "model.optimizer.weight_decay", "label_smoothing": "model.label_smoothing",
                "augmentation": "data.augment", "task_interpolation": "data.task_interpolation"}  # fmt: skip
CLASSES_CELL = ROOT / "studies/scarce_classes/k12/glyphs_100_5w5s__protonet_cosine_conv4"
EUCLIDEAN_CELL = ROOT / "studies/scarce5/n60/glyphs_100_5w5s__protonet_euclidean_conv4"
_ARMS = ("uniform_online", "uniform_online_placebo", "uniform_online_scale", "uniform_online_self")
_MECHANISM = [(STUDY_CELL, "baseline_online", arm, (), 5) for arm in _ARMS]
_EUCLIDEAN = [(EUCLIDEAN_CELL, "baseline_online", arm, (), 5) for arm in (*_ARMS, "uniform_offline")]
_REGULARISERS = [(REGULARISERS_CELL, "baseline_online", arm, (setting,), 5) for arm, setting in REGULARISERS.items()]
#: the class-subset study's arms by its plan's rule: three trainings each, five for those that differed by more than
#: the baseline's spread (studies/scarce_classes/PLAN.md)
_CLASSES = [
    (CLASSES_CELL, "baseline_online", "uniform_online", (), 3),
    (CLASSES_CELL, "baseline_online", "task_interpolation", ("data.task_interpolation",), 5),
    (CLASSES_CELL, "baseline_online", "augmentation", ("data.augment",), 5),
]
#: resampling at its target (three trainings, studies/scarce_resample/PLAN.md): the primary endpoint, the aim given the
#: pool, and re-weighting against resampling
RESAMPLE_CELL = ROOT / "studies/scarce_resample/n60/glyphs_100_5w5s__protonet_cosine_conv4"
_RESAMPLE = [
    (RESAMPLE_CELL, "baseline_online", "uniform_resample_empirical16", (), 3),
    (RESAMPLE_CELL, "uniform_resample_placebo_empirical16", "uniform_resample_empirical16", (), 3),
    (RESAMPLE_CELL, "uniform_resample_empirical16", "uniform_online", (), 3),
]
#: the dose-response study's two levels that the answers quote (three trainings each, studies/scarce_dose/PLAN.md)
DOSE_LEVELS = [ROOT / f"studies/scarce_dose/n{n}" for n in (30, 60, 120, 240)]
_DOSE = [(DOSE_LEVELS[i] / STUDY_CELL.name, "baseline_online", "uniform_online", (), 3) for i in (0, 3)]
QUOTED: dict[str, list[Any]] = {  # the page: its answer's heading, then the comparisons it quotes
    "README.md": [
        "## Does uniform sampling help?",
        *_MECHANISM,
        *_EUCLIDEAN[:2],
        *_REGULARISERS[2:],
        (REGULARISERS_CELL, "augmentation", "uniform_augmentation", (), 5),
        *_CLASSES,
        *_DOSE,
    ],  # fmt: skip
    "docs/study.md": [
        "## The answer (",
        *_MECHANISM,
        (STUDY_CELL, "uniform_online_placebo", "uniform_online", (), 5),
        (STUDY_CELL, "uniform_online_scale", "uniform_online", (), 5),
        *_EUCLIDEAN,
        (EUCLIDEAN_CELL, "uniform_online_placebo", "uniform_online", (), 5),
        (EUCLIDEAN_CELL, "uniform_online_scale", "uniform_online", (), 5),
        *_REGULARISERS,
        (REGULARISERS_CELL, "augmentation", "uniform_augmentation", (), 5),
        *_CLASSES,
        *_DOSE,
        *_RESAMPLE,
    ],
}
#: the most lines each page's answer may take (the figure and the links after it not counted)
ANSWER_LINES = {"README.md": 8, "docs/study.md": 12}


@pytest.mark.parametrize("page", sorted(QUOTED))
def test_the_answers_numbers_are_the_records(page: str) -> None:
    """The study's answer quotes each difference over trainings as ``compare`` gives it from the records (the mean of
    the seed pairs' differences ± its 95% t interval): a training that lands and changes one fails this until the
    text says so."""
    from lightning_episodes.commands.compare import compare_scenario

    heading, *quoted_comparisons = QUOTED[page]
    text = (ROOT / page).read_text()
    start = text.index(heading)
    answer = " ".join(text[start : text.index("\n## ", start + len(heading))].split())  # a number may wrap
    for cell, baseline, treatment, differing, trainings in quoted_comparisons:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeds made on different processors, each pair on one (the plan's)
            _, comparison, _ = compare_scenario(cell, baseline, treatment, seeds="tested", differing=differing)
        difference = comparison.difference
        assert difference.trainings == trainings
        quoted = f"{100 * difference.seed_mean:+.2f} ± {100 * difference.seed_ci95:.2f}"
        quoted = quoted.replace("-", "−")
        assert quoted in answer, f"{page} does not quote {treatment} − {baseline} as {quoted}"


@pytest.mark.parametrize("page", sorted(ANSWER_LINES))
def test_the_answer_is_short(page: str) -> None:
    """The study's answer is one paragraph of at most 8 lines in the README and 12 on the study's page: its first
    paragraph after the heading, up to the figure or the link to the rest."""
    heading = QUOTED[page][0]
    text = (ROOT / page).read_text()
    start = text.index("\n\n", text.index(heading)) + 2
    paragraph = text[start : text.index("\n\n", start)].splitlines()
    assert 3 <= len(paragraph) <= ANSWER_LINES[page], f"{page}'s answer takes {len(paragraph)} lines"
    assert all(len(line) <= 120 for line in paragraph)


def test_the_readmes_forest_plot_is_the_records() -> None:
    """The README shows the committed copy of the site's forest plot (a repository's file view draws nothing at build
    time); the copy keeps the rows it drew, which must be the rows the records give now: regenerate it with
    ``python docs/hooks/make_figures.py docs/img scarce-forest`` when a training lands."""
    figures = runpy.run_path(str(ROOT / "docs/hooks/make_figures.py"))
    assert f"]({figures['FOREST_COPY']})" in README
    with Image.open(ROOT / figures["FOREST_COPY"]) as image:
        drawn = image.text[figures["FOREST_KEY"]]  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeds made on different processors, each pair on one (the plans')
        now = figures["forest_description"](ROOT)
    assert drawn == now, "docs/img/scarce-forest.png is stale: python docs/hooks/make_figures.py docs/img scarce-forest"
    assert "12 classes" in now
    assert "uniform_augmentation − augmentation" in now


def test_the_study_pages_dose_response_is_the_scripts_output(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/study.md's dose-response table and its primary line are what the plan's analysis command,
    ``scripts/dose_response.py`` over the four level folders, prints from the records."""
    script = runpy.run_path(str(ROOT / "scripts/dose_response.py"))
    assert script["main"]([str(level) for level in DOSE_LEVELS]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\| \d+ \| \d+ \|", line)]
    assert [row.split("|")[2].strip() for row in rows] == ["3"] * 4  # every level at its three trainings
    page = (ROOT / "docs/study.md").read_text()
    for row in rows:
        assert row in page, f"docs/study.md's dose-response table has no row {row!r}"
    (primary,) = (line for line in out.splitlines() if line.startswith("Primary:"))
    assert f"**Primary: {primary.split(': ', 2)[2]}**" in page


#: the data-scarce study's Holm families that docs/study.md quotes adjusted p's of, each (scenario, baseline,
#: treatment): the primary endpoint over the two ProtoNet cells (studies/scarce/PLAN.md), and the 13 secondary
#: comparisons over three trainings, a family set after the fact (the page says so and names its members)
SCARCE_CELL = "studies/scarce/n60/glyphs_100_5w5s__protonet_{}_conv4"
STATIC_DPP = ("studies/scarce_static_dpp/n60/glyphs_100_5w5s__protonet_cosine_conv4", "baseline_online",
              "baseline_online__static_dpp")  # fmt: skip
PRIMARY_FAMILY = [(SCARCE_CELL.format(cell), "baseline_online", "uniform_online") for cell in ("cosine", "euclidean")]
SECONDARY_FAMILY = [
    *(
        (SCARCE_CELL.format(cell), "baseline_online", arm)
        for cell in ("cosine", "euclidean")
        for arm in ("uniform_resample", "uniform_online_placebo", "baseline_online__no_diversity_batch")
    ),
    (SCARCE_CELL.format("cosine"), "baseline_online", "baseline_online__dynamic_dpp"),
    (SCARCE_CELL.format("euclidean"), "baseline_online", "baseline_online__hard_task_mining"),
    STATIC_DPP,
    *(
        (SCARCE_CELL.format(cell), baseline, "uniform_online")
        for cell in ("cosine", "euclidean")
        for baseline in ("uniform_online_placebo", "uniform_resample")
    ),
]


def _holm_over(family: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], float]:
    """Each comparison's p as ``compare`` gives it from the records (over trainings), Holm-adjusted over the family."""
    from lightning_episodes.analysis.comparison import holm
    from lightning_episodes.commands.compare import compare_scenario

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the static DPP's seeds 1-2 ran on another processor, each pair on one
        rows = [compare_scenario(ROOT / cell, baseline, arm, seeds="tested")[1] for cell, baseline, arm in family]
    assert all(row.over_trainings and len(row.seeds) == 3 for row in rows)
    return dict(zip(family, holm([row.pvalue for row in rows]), strict=True))


def test_the_study_quotes_the_holm_adjusted_p_of_its_data_scarce_families() -> None:
    """docs/study.md gives the raw p of the data-scarce primary endpoint and of the static DPP beside the p that Holm's
    correction over each one's family gives, as computed from the records. Both families span cells, which
    ``compare --correction holm`` (within a cell) does not; the page's commands compute them as this test does."""
    text = " ".join((ROOT / "docs/study.md").read_text().split())  # a phrase may wrap anywhere
    assert "Holm-corrected" not in text  # the raw p was once quoted under this name
    primary = _holm_over(PRIMARY_FAMILY)[PRIMARY_FAMILY[0]]
    secondary = _holm_over(SECONDARY_FAMILY)
    static_dpp = secondary[STATIC_DPP]
    no_diversity = [secondary[(SCARCE_CELL.format(cell), "baseline_online", "baseline_online__no_diversity_batch")]
                    for cell in ("cosine", "euclidean")]  # fmt: skip
    uniform_resample = secondary[(SCARCE_CELL.format("cosine"), "uniform_resample", "uniform_online")]
    rest = min(p for key, p in secondary.items() if key != STATIC_DPP and "no_diversity" not in key[2])
    quoted = [
        f"Holm-adjusted over the two cells {primary:.3f}",
        f"{primary:.3f} Holm-adjusted over the two cells",
        f"its Holm-adjusted p is {primary:.3f}",
        f"Holm over the two cells {primary:.3f}",
        f"{static_dpp:.3f} after Holm over the study's {len(SECONDARY_FAMILY)} secondary comparisons",
        f"Holm over the {len(SECONDARY_FAMILY)} secondary comparisons {static_dpp:.3f}",
        f"{static_dpp:.3f} after Holm over the family",
        f"({no_diversity[0]:.3f} cosine, {no_diversity[1]:.3f} Euclidean); the static DPP is at {static_dpp:.3f}, "
        f"every other comparison at {rest:.3f} or more",
        *(f"Holm over the {len(SECONDARY_FAMILY)} secondary comparisons {p:.3f}" for p in no_diversity),
        f"it is this study's {len(SECONDARY_FAMILY)} comparisons over three trainings",
        f"{uniform_resample:.3f} after Holm over the {len(SECONDARY_FAMILY)} secondary comparisons",
    ]
    for phrase in quoted:
        assert phrase in text, f"docs/study.md does not say {phrase!r}"
    assert primary < 0.05 < static_dpp


_MECHANISM_ARGUMENTS = ["--treatment", "uniform_online_placebo", "uniform_online_self", "uniform_online_scale",
                        "uniform_offline", "--contrast", "uniform_online:uniform_online_placebo",
                        "uniform_online:uniform_online_scale"]  # fmt: skip
#: each table of a Holm family in docs/study.md: its family, its scenario, compare's arguments, how the table starts,
#: and whether it also holds the primary endpoint (a row outside the family)
FAMILY_TABLES = {
    "M, cosine": ("M", STUDY_CELL, _MECHANISM_ARGUMENTS,
                  "| comparison | over five trainings (pp) | p | p (Holm, family M, m = 6)", True),
    "M, Euclidean": ("M", EUCLIDEAN_CELL, _MECHANISM_ARGUMENTS,
                     "| comparison, Euclidean | over five trainings (pp) | p | p (Holm, family M, m = 6)", True),
    "R": ("R", REGULARISERS_CELL, ["--treatment", *REGULARISERS, "--contrast", "uniform_augmentation:augmentation",
                                   "--differing", f"[{','.join(REGULARISERS.values())}]"],
          "| comparison | over five trainings (pp) | p | p (Holm, family R, m = 5)", False),
    "K": ("K", CLASSES_CELL, ["--treatment", "uniform_online_placebo", "uniform_online_scale", "task_interpolation",
                              "augmentation", "--differing", "[data.task_interpolation,data.augment]"],
          "| comparison | over trainings (pp) | p | p (Holm, family K, m = 4)", True),
    "S": ("S", RESAMPLE_CELL, ["--treatment", "uniform_resample_placebo_empirical16", "--contrast",
                               "uniform_resample_empirical16:uniform_resample_placebo_empirical16",
                               "uniform_online:uniform_resample_empirical16"],
          "| comparison, resampling | over three trainings (pp) | p | p (Holm, family S, m = 3)", True),
}  # fmt: skip


@pytest.mark.parametrize("table", sorted(FAMILY_TABLES))
def test_the_study_pages_family_tables_are_compares_one_command(table: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The five-training study's family tables give, per comparison, the difference over trainings, the raw p and the
    Holm-adjusted p that ``compare ... --correction holm`` prints from the records in one command (the page's)."""
    from lightning_episodes.commands.compare import main

    family, scenario, arguments, header, with_primary = FAMILY_TABLES[table]
    argv = [str(scenario), "--seeds", "tested", *arguments, "--correction", "holm", "--family", family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeds made on different processors, each pair on one (the plan's)
        assert main(argv) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| Glyphs-100")]
    page = (ROOT / "docs/study.md").read_text()
    lines = page[page.index(header) :]
    lines = lines[: lines.index("\n\n")].replace("**", "").replace("−", "-")
    assert len(rows) == len(lines.splitlines()) - 2 - with_primary
    for row in rows:
        difference, raw, adjusted = (cell.strip() for cell in row[4:7])
        mean = difference.split(" (")[0]
        assert f"| {mean} | {raw} | {adjusted} |" in lines, (
            f"docs/study.md's family-{table} table has no row {mean} | {raw} | {adjusted}"
        )


MAML_CELL = ROOT / "studies/scarce_maml/n60/glyphs_100_5w5s__maml_conv4"
#: the MAML study's arms as docs/study.md names them, each with its run folder
MAML_ARMS = {
    "G2 self-normalised": "uniform_online_self",
    "G3 scale-only": "uniform_online_scale",
    "G4 uniform from step 1,000": "uniform_online_after1000",
    "G5 baseline": "baseline_online_sgd",
    "G6 uniform": "uniform_online_sgd",
    "the baseline's": "baseline_online",
    "uniform's": "uniform_online",
}


def test_the_maml_studys_landed_numbers_are_the_records() -> None:
    """docs/study.md quotes each landed MAML arm of each seed as ``<name> <test>% (<val 1,000> / <val 2,000> / <val
    3,000>``: its test accuracy and its validation accuracy at those steps, read here from its ``test_results.json``."""
    text = " ".join((ROOT / "docs/study.md").read_text().split())  # a phrase may wrap anywhere
    landed = 0
    for seed in ("seed0", "seed1"):
        for name, folder in MAML_ARMS.items():
            records = list((MAML_CELL / seed / folder).rglob("test_results.json"))
            if seed == "seed0":
                assert len(records) == 1, f"{seed}/{folder}: seed 0 is complete"
            for record in records:
                result = json.loads(record.read_text())
                curve = dict(result["validation"])
                points = " / ".join(f"{100 * curve[step]:.1f}" for step in (1000, 2000, 3000))
                phrase = f"{name} {100 * result['accuracy']:.2f}% ({points}"
                assert phrase in text, f"docs/study.md does not say {phrase!r} ({seed})"
                landed += 1
    assert landed == 14  # seven arms at each of the two seeds: the study is complete
