"""Start-up benchmark: what --help, --version and a usage error cost, next to click and rich.

    python bench/startup.py [--runs 7]

Each case runs ``--runs`` times in a fresh process, one of each case per round (so a busy
moment of a shared machine falls on every case alike), and the table gives medians:

- ``cpu ms``: the child's user + system CPU time (``getrusage(RUSAGE_CHILDREN)`` before and
  after it), steadier than the wall clock on a loaded machine;
- ``wall ms``: from start to exit;
- ``x click+rich``: CPU time over that of ``python -c "import click, rich"``, the least a
  command line built on them can take. Target: ``--version``, ``--help`` and a usage error
  within 1.5x.

The command line is the ``taskdecomp`` script next to this Python (``sys.executable``), or
``python -m taskdecomp`` where that exists, else ``python -c`` calling the script's entry
point; either runs the ``taskdecomp`` first on the path, so ``PYTHONPATH=src`` measures a
checkout. The usage errors: an unknown option, and ``run`` without its required ``--tools``
(which imports that command's module). Last, whether ``import taskdecomp`` imported
SQLAlchemy or pydantic (it should import neither).
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 1.5
"""--help, --version and a usage error, over ``import click, rich``, in CPU time."""
BASE = "import click, rich"


def command_line() -> list[str]:
    script = Path(sys.executable).with_name("taskdecomp")
    if script.exists():
        return [str(script)]
    if importlib.util.find_spec("taskdecomp.__main__") is not None:
        return [sys.executable, "-m", "taskdecomp"]
    return [sys.executable, "-c", "from taskdecomp_entry import main; main()"]


def cases() -> dict[str, list[str]]:
    cli = command_line()
    python = [sys.executable, "-c"]
    return {
        "python -c pass": [*python, "pass"],
        f'python -c "{BASE}"': [*python, BASE],
        "taskdecomp --version": [*cli, "--version"],
        "taskdecomp --help": [*cli, "--help"],
        "usage error: taskdecomp --bogus": [*cli, "--bogus"],
        "usage error: taskdecomp run": [*cli, "run"],
        'python -c "import taskdecomp"': [*python, "import taskdecomp"],
    }


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: list[str]) -> tuple[float, float]:
    """CPU and wall seconds of one run of ``argv``."""
    cpu, start = child_cpu(), time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return child_cpu() - cpu, time.perf_counter() - start


def heavy_imports(*names: str) -> dict[str, bool]:
    """Whether ``import taskdecomp`` imports each of ``names``."""
    code = "import sys, taskdecomp; print(*(name in sys.modules for name in sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *names], capture_output=True, text=True, check=True
    )
    return dict(zip(names, (word == "True" for word in done.stdout.split()), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="Runs of each case (median).")
    args = parser.parse_args()
    runs = cases()
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    for argv in runs.values():
        measure(argv)  # warm the disk cache and the bytecode
    for _ in range(args.runs):
        for name, argv in runs.items():
            seconds, elapsed = measure(argv)
            cpu[name].append(seconds)
            wall[name].append(elapsed)
    print_table(
        {name: statistics.median(values) for name, values in cpu.items()},
        {name: statistics.median(values) for name, values in wall.items()},
        runs=args.runs,
    )
    found = heavy_imports("sqlalchemy", "pydantic")
    print(
        "\nimport taskdecomp imported "
        + ", ".join(f"{name}: {'yes' if on else 'no'}" for name, on in found.items())
    )


def print_table(cpu: dict[str, float], wall: dict[str, float], *, runs: int) -> None:
    base = cpu[f'python -c "{BASE}"']
    print(f"command line: {' '.join(command_line())}; median of {runs} runs\n")
    print(f"| case | cpu ms | wall ms | x click+rich | within {TARGET_RATIO}x |")
    print("|---|---:|---:|---:|---|")
    for name in cpu:
        ratio = cpu[name] / base
        verdict = ""
        if name.startswith(("taskdecomp", "usage error")):
            verdict = "yes" if ratio <= TARGET_RATIO else "NO"
        print(
            f"| {name} | {cpu[name] * 1000:.0f} | {wall[name] * 1000:.0f} | {ratio:.2f} "
            f"| {verdict} |"
        )


if __name__ == "__main__":
    main()
