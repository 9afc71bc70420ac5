"""Every study folder has a plan, and its records come after it: checked against the repository's git history.

A study is a folder of ``studies/``; its plan is ``studies/<study>/PLAN.md``, with the sections a reader needs to know
what was fixed before the runs (cells, arms, seeds, primary endpoint, correction, analysis, the rule for adding seeds
or arms). A record is a ``test_results.json`` below the study. Unless the plan says it was written after the fact:

- the commit that first added each record is a strict descendant of the commit that first added the plan (a record
  committed with its plan, or before it, was not planned before);
- the plan as it stood at the first record's commit is a prefix of today's plan, and what follows it is made of dated
  amendment sections (``## Amendment YYYY-MM-DD``).
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
SECTIONS = ("Cells", "Arms", "Seeds", "Primary endpoint", "Correction", "Analysis", "Rule for adding seeds or arms")
AFTER_THE_FACT = "written after the fact"
AMENDMENT = re.compile(r"^## Amendment \d{4}-\d{2}-\d{2}\b", re.MULTILINE)
RECORD = "test_results.json"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


@cache
def _history() -> bool:
    """Whether the checkout has the git history the order check needs (not a shallow clone, not a bare copy)."""
    try:
        return _git("rev-parse", "--is-shallow-repository").strip() == "false"
    except (OSError, subprocess.CalledProcessError):
        return False


@cache
def _first_commits(folder: str) -> dict[str, str]:
    """``{path: the commit that first added it}`` for every file ever added under ``folder`` (one ``git log``)."""
    out = _git("log", "--diff-filter=A", "--format=commit %H", "--name-only", "--reverse", "--", folder)
    first: dict[str, str] = {}
    commit = ""
    for line in out.splitlines():
        if line.startswith("commit "):
            commit = line.removeprefix("commit ")
        elif line.strip():
            first.setdefault(line.strip(), commit)
    return first


def _is_ancestor(older: str, newer: str) -> bool:
    result = subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=ROOT, capture_output=True)
    return result.returncode == 0


def _plan_at(commit: str, path: str) -> str | None:
    """The plan's text at ``commit`` (``None`` where it did not exist yet)."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def plan_problems(
    plan: str, plan_commit: str | None, records: dict[str, str], plan_at: dict[str, str | None]
) -> list[str]:
    """What is wrong with one study's plan and records.

    Args:
        plan: today's PLAN.md.
        plan_commit: the commit that first added it (``None``: never committed).
        records: ``{record path: the commit that first added it}`` (committed records only).
        plan_at: ``{commit: the plan's text at that commit, None before it existed}`` for the commits of ``records``.

    Returns:
        One sentence per problem (empty: the study keeps its plan).
    """
    problems = [f"no '## {name}' section" for name in SECTIONS if not re.search(rf"^## {name}\b", plan, re.MULTILINE)]
    if AFTER_THE_FACT in plan.lower() or not records:
        return problems
    if plan_commit is None:
        return [*problems, "records are committed but the plan is not"]
    early = [path for path, commit in records.items() if commit == plan_commit or not _is_ancestor(plan_commit, commit)]
    problems += [f"{path} is not newer than the plan's commit {plan_commit[:7]}" for path in sorted(early)]
    first = min(records.values(), key=lambda commit: int(_git("rev-list", "--count", commit)))
    before = plan_at[first]
    if before is None:  # the first record predates the plan: reported above
        return problems
    if not plan.startswith(before):
        problems.append(f"the plan changed after its first record ({first[:7]}) other than by appending amendments")
    else:
        added = plan[len(before) :].strip()
        if added and not AMENDMENT.match(added):
            problems.append(f"text added after the first record ({first[:7]}) is not under '## Amendment YYYY-MM-DD'")
    return problems


def _studies() -> list[Path]:
    return sorted(path for path in STUDIES.iterdir() if path.is_dir())


@pytest.mark.parametrize("study", _studies(), ids=lambda path: path.name)
def test_every_study_has_a_plan_with_its_sections(study: Path) -> None:
    plan = study / "PLAN.md"
    assert plan.is_file(), f"{study.relative_to(ROOT)} has no PLAN.md"
    text = plan.read_text()
    missing = [name for name in SECTIONS if not re.search(rf"^## {name}\b", text, re.MULTILINE)]
    assert not missing, f"{plan.relative_to(ROOT)} lacks the sections {missing}"


@pytest.mark.parametrize("study", _studies(), ids=lambda path: path.name)
def test_every_record_is_newer_than_its_plan_and_the_plan_only_gains_amendments(study: Path) -> None:
    if not _history():
        pytest.skip("needs the repository's full git history (a shallow clone or no git)")
    folder = str(study.relative_to(ROOT))
    first = _first_commits(folder)
    plan_path = f"{folder}/PLAN.md"
    records = {path: commit for path, commit in first.items() if path.endswith(RECORD) and (ROOT / path).exists()}
    plan = (study / "PLAN.md").read_text()
    late = AFTER_THE_FACT in plan.lower()
    plan_at = {} if late else {commit: _plan_at(commit, plan_path) for commit in set(records.values())}
    problems = plan_problems(plan, first.get(plan_path), records, plan_at)
    assert not problems, f"{plan_path}: " + "; ".join(problems)


# the check itself, on commits given by hand: it must fail where a plan was not kept


PLAN = "# Plan\n" + "".join(f"## {name}\nx\n" for name in SECTIONS)


def test_the_check_refuses_records_committed_with_or_before_their_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []

    def ancestor(older: str, newer: str) -> bool:
        calls.append((older, newer))
        return newer == "later"

    monkeypatch.setattr(f"{__name__}._is_ancestor", ancestor)
    monkeypatch.setattr(f"{__name__}._git", lambda *args: "1" if args[0] == "rev-list" else "")
    same = plan_problems(PLAN, "plan", {"a/test_results.json": "plan"}, {"plan": PLAN})
    assert same == ["a/test_results.json is not newer than the plan's commit plan"]
    older = plan_problems(PLAN, "plan", {"b/test_results.json": "earlier"}, {"earlier": PLAN})
    assert older == ["b/test_results.json is not newer than the plan's commit plan"]
    assert plan_problems(PLAN, "plan", {"c/test_results.json": "later"}, {"later": PLAN}) == []
    assert plan_problems(PLAN, None, {"c/test_results.json": "later"}, {"later": PLAN}) == [
        "records are committed but the plan is not"
    ]
    # a plan written after the fact is exempt from the order, not from its sections
    late = PLAN + "Written after the fact.\n"
    assert plan_problems(late, "plan", {"a/test_results.json": "plan"}, {"plan": late}) == []
    assert plan_problems("# Written after the fact\n", None, {}, {}) == [f"no '## {name}' section" for name in SECTIONS]


def test_the_check_allows_dated_amendments_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}._is_ancestor", lambda older, newer: True)
    monkeypatch.setattr(f"{__name__}._git", lambda *args: "1")
    records, at = {"a/test_results.json": "r"}, {"r": PLAN}
    assert plan_problems(PLAN + "\n## Amendment 2026-12-03\nseeds 5-9\n", "p", records, at) == []
    assert plan_problems(PLAN + "\nmore seeds\n", "p", records, at) == [
        "text added after the first record (r) is not under '## Amendment YYYY-MM-DD'"
    ]
    edited = PLAN.replace("## Seeds\nx", "## Seeds\ny")
    assert plan_problems(edited, "p", records, at) == [
        "the plan changed after its first record (r) other than by appending amendments"
    ]
