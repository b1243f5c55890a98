"""How fast `forge --help` and a dry-run plan answer, next to a bare Python start-up (the floor).

    .venv/bin/python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_seconds(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    py = sys.executable
    cases = {
        "python -c pass (floor)": [py, "-c", "pass"],
        "forge --help": [py, "-m", "forge_cli", "--help"],
        "forge config show": [py, "-m", "forge_cli", "config", "show"],
        "forge rollout --dry-run --json": [py, "-m", "forge_cli", "rollout", "--dry-run", "--json"],
    }
    floor = None
    print(f"{'command':34} {'median s':>9} {'x floor':>8}")
    for name, argv in cases.items():
        seconds = median_seconds(argv, runs)
        floor = floor or seconds
        print(f"{name:34} {seconds:9.3f} {seconds / floor:8.1f}")
    print("target: forge --help well under 1 s")


if __name__ == "__main__":
    main()
