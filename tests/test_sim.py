"""The deterministic simulation of the sessions layer (tests/sim), as CI runs it: 2,000 seeds
must find nothing, a deliberately broken invariant must be caught within 200 seeds, and a few
fault schedules written out by hand (ones that found bugs) stay green.

The seeds run in `python -m tests.sim` processes, two at a time (the machine has two cores):
each process fixes the hash seed, so that a seed that fails here fails alike when replayed
with the command the failure prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sim.__main__ import SCENARIO_NAMES  # every schedule the CLI runs (it checks them against scenarios.py)

ROOT = Path(__file__).resolve().parent.parent
SEEDS = 2000
CHUNKS = 2  # processes at a time
# On an idle 2-core machine the 2,000 seeds take ~1 min (each process ~16 seeds/s). The
# suite must pass on a loaded machine too, so the wall time is printed, not asserted; the
# timeout only stops a run that hangs.
TIMEOUT = 1800.0


def _run(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen([sys.executable, "-m", "tests.sim", "--json", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(process: subprocess.Popen[str], timeout: float) -> tuple[list[dict], dict]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and "seeds" in lines[-1], f"no summary from the simulation:\n{out[-2000:]}\n{err[-4000:]}"
    return lines[:-1], lines[-1]


@pytest.mark.timeout(TIMEOUT)
def test_two_thousand_schedules_find_nothing():
    started = time.monotonic()
    step = SEEDS // CHUNKS
    processes = [_run("--seeds", f"{start}:{start + step}") for start in range(0, SEEDS, step)]
    failures, ran, turns, frames = [], 0, 0, 0
    for process in processes:
        found, summary = _results(process, TIMEOUT)
        failures += found
        ran += summary["seeds"]
        turns += summary["turns"]
        frames += summary["frames"]
    took = time.monotonic() - started
    report = "\n".join(f"seed {f['seed']}: {f['violations'][:3]}\n  replay: {f['replay']}" for f in failures[:5])
    assert not failures, f"{len(failures)} of {ran} seeds failed:\n{report}"
    assert ran == SEEDS
    # The seeds ran turns that streamed (a harness that fails every socket finds nothing).
    assert turns >= SEEDS and frames >= 20 * SEEDS, (turns, frames)
    print(f"{ran} seeds in {took:.0f} s ({ran / took:.1f} seeds/s): {turns} turns, {frames} frames")


@pytest.mark.parametrize("bug", ["send-before-store", "after-done", "skip-store", "rerun-unsafe", "urgent-alone"])
def test_a_broken_invariant_is_caught_within_200_seeds(bug: str):
    found, summary = _results(_run("--seeds", "0:200", "--bug", bug, "--stop-after", "1"), 300)
    assert found, f"the checker missed the {bug} bug in {summary['seeds']} seeds"
    assert f"--bug {bug}" in found[0]["replay"]


# Seeds of the random schedules, past the 2,000 above or on code since changed, that found a
# bug: 373 and 4730 (a command held by a copy let go took the conversation in that copy),
# 2508 (a replay sent frames a `status` queued meanwhile came before).
FOUND = [373, 2508, 4192, 4730]


@pytest.mark.parametrize("seed", FOUND)
def test_the_seeds_that_found_bugs_stay_green(seed: int):
    found, summary = _results(_run("--seeds", f"{seed}:{seed + 1}"), 300)
    assert not found, f"seed {seed}: {found[0]['violations'][:3]}\n  replay: {found[0]['replay']}"
    assert summary["seeds"] == 1


# Each schedule with 30 seeds for the clients' choices; where few of those meet a schedule's
# bugs, the seeds that did.
SCENARIO_SEEDS = {"opened-twice": ["1090:1100", "1270:1280", "1340:1350"]}  # 1096, 1274, 1344


@pytest.mark.parametrize(("scenario", "seeds"), [(name, seeds) for name in SCENARIO_NAMES
                                                 for seeds in SCENARIO_SEEDS.get(name, ["0:30"])])
def test_the_schedules_that_found_bugs_stay_green(scenario: str, seeds: str):
    found, summary = _results(_run("--seeds", seeds, "--scenario", scenario), 300)
    report = "\n".join(f"seed {f['seed']}: {f['violations'][:3]}\n  replay: {f['replay']}" for f in found[:3])
    assert not found, f"{len(found)} of {summary['seeds']} seeds failed:\n{report}"
