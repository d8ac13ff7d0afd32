"""`python -m tests.sim`: runs seeds, says which failed and how to replay each."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.sim.bugs import BUGS, HUB_BUGS

SCENARIO_NAMES = ("cut", "in-doubt", "lease-lost", "takeover", "take-back", "hand-over", "opened-twice")  # tests/sim/scenarios.py

# Sets of strings iterate in an order that depends on the hash seed: fixed, so that a seed
# replays alike in any process.
HASH_SEED = "0"


def _seeds(text: str) -> range:
    start, _, stop = text.partition(":")
    return range(int(start), int(stop)) if stop else range(int(start), int(start) + 1)


def replay_command(seed: int, bug: str | None, scenario: str | None = None) -> str:
    return (f"python -m tests.sim --seed {seed} --verbose" + (f" --bug {bug}" if bug else "")
            + (f" --scenario {scenario}" if scenario else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", help="a range START:STOP (STOP excluded)")
    which.add_argument("--seed", type=int, help="one seed")
    parser.add_argument("--verbose", action="store_true", help="print the run's trace")
    parser.add_argument("--bug", choices=sorted([*BUGS, *HUB_BUGS]), help="turn a deliberate bug on")
    parser.add_argument("--scenario", choices=sorted(SCENARIO_NAMES), help="a fault schedule written by hand")
    parser.add_argument("--json", action="store_true", help="one JSON line per failing seed, and a summary line")
    parser.add_argument("--stop-after", type=int, default=0, help="stop after this many failing seeds")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.environ["PYTHONHASHSEED"] = HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *(argv if argv is not None else sys.argv[1:])])
    from tests.sim.run import Simulation
    from tests.sim.scenarios import SCENARIOS

    assert set(SCENARIOS) == set(SCENARIO_NAMES), "tests/sim/scenarios.py and SCENARIO_NAMES disagree"

    seeds = _seeds(args.seeds) if args.seeds else range(args.seed, args.seed + 1)
    started, failed, ran = time.perf_counter(), 0, 0
    totals = {"turns": 0, "frames": 0, "connections": 0}  # what the seeds did: a run that did nothing finds nothing
    for seed in seeds:
        plan = SCENARIOS[args.scenario]() if args.scenario else None
        outcome = Simulation(seed, bug=args.bug, verbose=args.verbose, plan=plan).run()
        ran += 1
        for key in totals:
            totals[key] += outcome.stats.get(key, 0)
        if args.verbose and outcome.trace:
            print("\n".join(outcome.trace))
        if outcome.violations:
            failed += 1
            if args.json:
                print(json.dumps({"seed": seed, "violations": outcome.violations[:10],
                                  "replay": replay_command(seed, args.bug, args.scenario)}), flush=True)
            else:
                print(f"seed {seed}: {len(outcome.violations)} violation(s)")
                for line in outcome.violations[:10]:
                    print(f"  {line}")
                print(f"  replay: {replay_command(seed, args.bug, args.scenario)}", flush=True)
        elif args.verbose:
            print(f"seed {seed}: ok {outcome.stats}")
        if args.stop_after and failed >= args.stop_after:
            break
    took = time.perf_counter() - started
    summary = {"seeds": ran, "failed": failed, "seconds": round(took, 1), "seeds_per_second": round(ran / took, 1),
               **totals}
    print(json.dumps(summary) if args.json else
          f"{ran} seeds, {failed} failed, {took:.1f} s ({ran / took:.1f} seeds/s); {totals['turns']} turns, "
          f"{totals['frames']} frames on {totals['connections']} connections")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
