"""No test, of the template or of the generated project, bounds a wall time.

A time bound fails on a loaded machine though nothing is wrong (the same default run took
13 s once and 26 s another time on one 2-core machine). Speed targets live in benchmarks/,
measured as ratios within one run; tests check correctness only.
"""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import TEMPLATE_DIR

TIME_NAME = (
    r"(elapsed\w*|\w*wall_time\w*|\w*duration\w*|\w*seconds\w*"
    r"|perf_counter\(\)|monotonic\(\)|time\(\))"
)
# `assert <time> < 60`, `assert <time> - start <= 2`, `assert 60 >= <time>`: an upper bound.
UPPER_BOUND = re.compile(
    rf"assert\b[^#\n]*{TIME_NAME}[^#\n<>]*<=?\s*[\d.]+|assert\s+[\d.]+\s*>=?[^#\n]*{TIME_NAME}"
)


def all_test_files() -> list[Path]:
    return sorted([*(TEMPLATE_DIR / "tests").glob("*.py"), *TEMPLATE_DIR.glob("*/tests/**/*.py")])


def test_no_test_compares_a_wall_time_to_a_constant() -> None:
    offenders = [
        f"{path.relative_to(TEMPLATE_DIR)}:{number}: {line.strip()}"
        for path in all_test_files()
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UPPER_BOUND.search(line)
    ]
    assert offenders == [], "move time bounds into benchmarks/:\n" + "\n".join(offenders)


def test_the_check_catches_the_usual_forms() -> None:
    for line in (
        'assert summary["wall_time_s"] <= 60, "too slow"',
        "assert elapsed <= 60",
        "assert time.perf_counter() - start < 2",
        "assert 30 >= duration_s",
    ):
        assert UPPER_BOUND.search(line), line
    for line in ('assert summary["wall_time_s"] > 0', "assert seen < KILL_AFTER_EPOCH"):
        assert not UPPER_BOUND.search(line), line
