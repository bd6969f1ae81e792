"""Hostile input: how long `scaletrain validate` takes, and how much memory, for each bad spec.

Every case of the malformed-spec table (tests/scaletrain_testing/malformed.py), plus the inputs that once took a
minute or gigabytes: 50 MB of annotations, 100,000-deep YAML, and a 100 MB podTemplate string. Each is
read from a file and validated in this process, as `scaletrain validate` does. Reports the slowest case
and the largest peak of Python allocations (tracemalloc). Targets: no case over 2 s or 300 MB, and
none that ends in a traceback.

    python bench/hostile_inputs.py     # writes bench/results/hostile_inputs.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

from scaletrain_operator.cli import InputError, load_jobs
from scaletrain_testing.jobs import base_job, patched
from scaletrain_testing.malformed import MALFORMED
from scaletrain_trainer.contract.validation import ProblemsError

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 2**20


def oversized_inputs() -> dict[str, str]:
    """Spliced into the base job's text: yaml.safe_dump of the 50 MB value alone takes half a minute."""
    job = yaml.safe_dump(base_job())
    return {
        "annotations-50MB": job.replace("metadata:\n", "metadata:\n  annotations:\n    a: " + "x" * 50 * MiB + "\n", 1),
        "yaml-100k-deep": job + "extra: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "pod-template-100MB": job.replace("spec:\n", "spec:\n  podTemplate: " + "y" * 100 * MiB + "\n", 1),
    }


def measure(text: str, directory: Path) -> tuple[float, int, str]:
    """Seconds and peak bytes to validate `text` from a file, and how it ended."""
    path = directory / "case.yaml"
    path.write_text(text)
    started = time.perf_counter()
    outcome = validate(path)
    seconds = time.perf_counter() - started
    tracemalloc.start()  # a second run for the memory: tracing slows it down several times
    validate(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, outcome


def validate(path: Path) -> str:
    try:
        load_jobs(str(path))
    except (InputError, ProblemsError):
        return "refused"
    except Exception as error:  # a traceback for the user: the benchmark reports it
        return f"traceback: {type(error).__name__}: {error}"[:200]
    return "valid"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cases = {case.name: yaml.safe_dump(patched(base_job(), case.patch)) for case in MALFORMED}
    cases |= oversized_inputs()
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for case_id, text in cases.items():
            seconds, peak, outcome = measure(text, Path(directory))
            results[case_id] = {"seconds": round(seconds, 4), "peakBytes": peak, "outcome": outcome}
    slowest = max(results, key=lambda case: results[case]["seconds"])
    largest = max(results, key=lambda case: results[case]["peakBytes"])
    tracebacks = sorted(case for case, result in results.items() if result["outcome"].startswith("traceback"))
    accepted = sorted(case for case, result in results.items() if result["outcome"] == "valid")
    report = {
        "cases": len(results),
        "slowest": {"case": slowest, **results[slowest]},
        "largestPeak": {"case": largest, **results[largest]},
        "tracebacks": tracebacks,
        "accepted": accepted,
        "results": results,
    }
    print(f"{'inputs':<24}{len(results)}")
    print(f"{'slowest':<24}{slowest}: {results[slowest]['seconds']:.3f} s (target <= 2 s)")
    print(f"{'largest peak':<24}{largest}: {results[largest]['peakBytes'] / MiB:.1f} MiB (target <= 300 MiB)")
    print(f"{'tracebacks':<24}{len(tracebacks)} {tracebacks}")
    print(f"{'accepted':<24}{len(accepted)} {accepted}")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "hostile_inputs.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
