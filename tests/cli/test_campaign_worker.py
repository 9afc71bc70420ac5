"""scripts/campaign_worker.sh: workers sharing a queue run each job once, skip a finished run, resume a stopped one
from its last.ckpt, and record every job's exit status; a missing queue is refused in one line."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "campaign_worker.sh"


def stand_in_python(tmp_path: Path, calls: Path, fail_on: str = "") -> Path:
    """A Python that records its command line and, unless the run folder names ``fail_on``, finishes the run."""
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        'for a in "$@"; do case $a in --trainer.default_root_dir=*) run=${a#*=};; esac; done\n'
        f'if [ -n "{fail_on}" ] && [[ $run == *{fail_on or "-"}* ]]; then exit 3; fi\n'
        "echo fitting; echo warned >&2\n"
        'mkdir -p "$run/lightning_logs/version_0" && echo "{}" > "$run/lightning_logs/version_0/test_results.json"\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def run_workers(tmp_path: Path, queue: Path, python: Path, workers: int) -> list[subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHON": str(python)}
    started = [
        subprocess.Popen(
            ["bash", str(SCRIPT), str(queue)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for _ in range(workers)
    ]
    results = []
    for process in started:
        out, err = process.communicate(timeout=60)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


def test_two_workers_run_every_job_once_skip_finished_runs_and_resume_stopped_ones(tmp_path: Path) -> None:
    runs = [tmp_path / f"runs/seed{seed}/{arm}" for seed in range(4) for arm in ("baseline", "uniform")]
    finished, stopped = runs[0], runs[1]
    (finished / "lightning_logs/version_0").mkdir(parents=True)
    (finished / "lightning_logs/version_0/test_results.json").write_text("{}")
    (stopped / "lightning_logs/version_0/checkpoints").mkdir(parents=True)
    (stopped / "lightning_logs/version_0/checkpoints/last.ckpt").write_bytes(b"")
    queue = tmp_path / "queue.txt"
    queue.write_text("".join(f"{run} --config a.yaml --seed_everything={i}\n" for i, run in enumerate(runs)))
    calls = tmp_path / "calls.txt"

    results = run_workers(tmp_path, queue, stand_in_python(tmp_path, calls, fail_on="seed3/uniform"), workers=2)

    assert all(result.returncode == 0 for result in results), [result.stderr for result in results]
    lines = calls.read_text().splitlines()
    assert len(lines) == len(runs) - 1  # the finished run is not fitted again
    by_run = {line.split("--trainer.default_root_dir=")[1].split()[0]: line for line in lines}
    assert set(by_run) == {str(run) for run in runs[1:]}
    assert all(line.startswith("-m lightning_episodes fit --config a.yaml") for line in lines)
    assert by_run[str(stopped)].endswith("--ckpt_path last")
    assert all("--ckpt_path" not in line for run, line in by_run.items() if run != str(stopped))
    assert queue.read_text() == ""
    assert (stopped / "fit.log").read_text().split() == ["fitting", "warned"]  # its output, stderr too, kept beside it
    done = (tmp_path / "queue.txt.done").read_text().splitlines()
    assert sorted(done) == sorted(
        [f"{runs[0]} --config a.yaml --seed_everything=0 # skipped: finished"]
        + [f"{run} --config a.yaml --seed_everything={i} # rc={3 if i == 7 else 0}" for i, run in enumerate(runs) if i]
    )


def test_a_missing_queue_is_refused_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "nowhere.txt")], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == f"campaign_worker.sh: no queue file {tmp_path / 'nowhere.txt'}"
