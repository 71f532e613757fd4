"""Where the test suite's time goes, from the JUnit report `make test` writes.

    .venv/bin/python tools/test_times.py [.tidemark/test-report.xml] [--top 25]

Prints each test file's time (its tests' setup, call and teardown), the slowest tests, and
the sum against the two workers' share: `make test` hands out whole files (``--dist
loadfile``), so a file is never split between the workers and the longest one bounds the wall.
Where the report has each test's CPU (``cpu_seconds``, written by `tests/conftest.py`: the
worker, its JVM and what the test started, not the shared servers), each file's CPU too: on two
busy cores, CPU is what a test takes from the other worker, and wall minus CPU is waiting. A
test whose CPU could not be told (``cpu_unknown``: its process tree lost a process) is left out
of the CPU sums and counted beside them, never read as zero.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def read_report(path: Path) -> list[tuple[str, str, float, str, float | None]]:
    """(file, test, seconds, outcome, CPU seconds or None) per test case of the report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"test_times: cannot read {path} ({exc}); run `make test` first") from exc
    cases = []
    for case in root.iter("testcase"):
        module = case.get("classname", "")
        file = module.replace(".", "/") + ".py" if module else "?"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        cpu = next(
            (
                float(p.get("value"))
                for p in case.iter("property")
                if p.get("name") == "cpu_seconds"
            ),
            None,
        )
        cases.append((file, case.get("name", "?"), float(case.get("time") or 0.0), outcome, cpu))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="?", default=".tidemark/test-report.xml", type=Path)
    parser.add_argument("--top", type=int, default=25, help="how many of the slowest tests")
    parser.add_argument("--workers", type=int, default=2, help="pytest -n of the run")
    args = parser.parse_args(argv)
    cases = read_report(args.report)
    if not cases:
        print(f"test_times: {args.report} holds no test case", file=sys.stderr)
        return 1
    per_file: dict[str, float] = defaultdict(float)
    cpu_file: dict[str, float] = defaultdict(float)
    wall_known: dict[str, float] = defaultdict(float)  # the wall of the tests whose CPU is known
    unknown: dict[str, int] = defaultdict(int)
    for file, _, seconds, _, cpu in cases:
        per_file[file] += seconds
        if cpu is None:
            unknown[file] += 1
        else:
            cpu_file[file] += cpu
            wall_known[file] += seconds
    measured = len(cases) > sum(unknown.values())
    total = sum(per_file.values())
    print(f"{len(cases)} tests in {len(per_file)} files: {total:,.0f} s in all")
    print(f"the share of each of {args.workers} workers: {total / args.workers:,.0f} s at best")
    if measured:
        cpu_total = sum(cpu_file.values())
        missing = sum(unknown.values())
        left_out = f", {missing} tests' CPU unknown and left out" if missing else ""
        print(f"their CPU (workers, their JVMs, what they started): {cpu_total:,.0f} s{left_out}")
        print("\nper file (wall s, share of all; CPU s, CPU / wall of the tests it is known for):")
    else:
        print("(no CPU per test in this report: it predates tests/conftest.py's cpu_seconds)")
        print("\nper file (s, share of all):")
    for file, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
        cpu = ""
        if measured and wall_known[file]:
            cpu = f"  {cpu_file[file]:8.1f}  {cpu_file[file] / wall_known[file]:5.2f}"
        elif measured:
            cpu = f"  {'unknown':>8}  {'':5}"
        share = seconds / total if total else 0.0
        note = f"  ({unknown[file]} CPU unknown)" if measured and unknown[file] else ""
        print(f"  {seconds:8.1f}  {share:6.1%}{cpu}  {file}{note}")
    print(f"\nthe {args.top} slowest tests (s{', CPU s' if measured else ''}):")
    for file, name, seconds, outcome, cpu in sorted(cases, key=lambda c: -c[2])[: args.top]:
        mark = "" if outcome == "passed" else f"  [{outcome}]"
        used = (f"  {cpu:8.1f}" if cpu is not None else f"  {'unknown':>8}") if measured else ""
        print(f"  {seconds:8.1f}{used}  {file}::{name}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
