"""Is conversion slower than it was at an earlier commit, on the same inputs?

``convert_speed.py`` measures the converter against libcst's own floor; this script answers the
question a refactoring must answer ("not slower than before"): it checks out ``--against REV`` in
a temporary git worktree and times that commit's converter and this tree's on the same files —
the fixture scripts of *this* tree and the typical 9 KB script — so the ratio compares the two
engines, not two corpora.

Each side runs in its own Python process (the two trees share module names), alternating, and
each file keeps its best CPU time (``time.process_time``) over all rounds of its side. Two modes:

- ``full``: ``convert_source`` as the CLI calls it, verification included;
- ``once``: parse, codemods, print — without the verification pass, whose design a commit may
  have changed on purpose (the printed-text verification re-parses the output).

Reported per mode: the median and 10th/90th percentile of new/old per file, and the total.
Files the old converter rejects are left out and listed.

``--old-codes-only`` runs this tree's converter with the codes the old commit did not have
switched off (``Options.ignore``, as ``--ignore`` does): the rules added since then do not run, so
the ratio compares the engines on the work both do (the rules both have may still have grown).

Usage: ``python benchmarks/convert_against_commit.py --against e39ac81 [--rounds 3] [--repeats 2]
[--old-codes-only]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Run inside each side's process: imports that side's converter (old trees had no
#: ``accel_convert`` package) and prints {file: best seconds or null} as JSON.
TIMER = r"""
import json, sys, time
from pathlib import Path
root, mode, rounds, ignore = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
files = sys.argv[5:]
sys.path.insert(0, root)
if Path(root, "accel_convert").is_dir():
    from accel_convert.codemods.engine.model import Options
    from accel_convert.codemods.engine.registry import code_docs
    from accel_convert.converter import pipeline
else:  # a tree from before the import name (the installed accel_convert is this checkout's)
    from codemods.base import Options
    from codemods.registry import code_docs
    from converter import pipeline
assert Path(pipeline.__file__).resolve().is_relative_to(Path(root).resolve()), pipeline.__file__
if mode == "codes":
    print(json.dumps(sorted({doc.code for doc in code_docs()})))
    sys.exit()

def once(source, options, path):
    parsed = pipeline.parse(source, path)
    module, codec = parsed if isinstance(parsed, tuple) else (parsed, None)
    out = pipeline.run_codemods(module, options, path, source).module
    return codec.generate(out) if codec is not None else pipeline.generate(out, path)

convert = pipeline.convert_source if mode == "full" else once
options = Options(ignore=tuple(ignore.split(","))) if ignore else Options()
best = {}
for _ in range(rounds):
    for path in files:
        source = Path(path).read_bytes()
        start = time.process_time()
        try:
            convert(source, options, path=path)
        except Exception:
            best[path] = None
            continue
        spent = time.process_time() - start
        if best.get(path, 0.0) is not None:
            best[path] = min(best.get(path, float("inf")), spent)
print(json.dumps(best))
"""


def time_side(root: Path, mode: str, rounds: int, files: list[str], ignore: list[str]) -> dict[str, float | None]:
    """Best CPU seconds per file of ``root``'s converter (``mode`` "codes": its codes instead)."""
    result = subprocess.run(
        [sys.executable, "-c", TIMER, str(root), mode, str(rounds), ",".join(ignore), *files],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    return json.loads(result.stdout)


def merge(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    best: dict[str, float | None] = {}
    for run in runs:
        for path, spent in run.items():
            if spent is None or best.get(path, 0.0) is None:
                best[path] = None
            else:
                best[path] = min(best.get(path) or float("inf"), spent)
    return best


def compare(old: dict[str, float | None], new: dict[str, float | None]) -> dict[str, object]:
    both = [path for path in new if old.get(path) is not None and new.get(path) is not None]
    ratio = {path: new[path] / old[path] for path in both}  # type: ignore[operator]
    ratios = sorted(ratio.values())
    return {
        "slowest": [f"{Path(path).name} {ratio[path]:.2f}" for path in sorted(ratio, key=ratio.get)[-5:]],
        "files": len(both),
        "left_out": sorted(Path(path).name for path in new if old.get(path) is None),
        "median": statistics.median(ratios),
        "p10": ratios[len(ratios) // 10],
        "p90": ratios[(9 * len(ratios)) // 10],
        "total_old_s": sum(old[path] for path in both),  # type: ignore[misc]
        "total_new_s": sum(new[path] for path in both),  # type: ignore[misc]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per process (best of)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating processes per side")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--old-codes-only", action="store_true", help="switch off this tree's codes the old commit did not have"
    )
    args = parser.parse_args()

    files = [str(path) for path in sorted((REPO_ROOT / "fixtures" / "cases").glob("*.py"))]
    files.append(str(REPO_ROOT / "benchmarks" / "data" / "typical_train.py"))
    results: dict[str, object] = {"against": args.against}
    with tempfile.TemporaryDirectory() as scratch:
        old_root = Path(scratch) / "old"
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-q", str(old_root), args.against],
            check=True,
        )
        try:
            ignore: list[str] = []
            if args.old_codes_only:
                old_codes = time_side(old_root, "codes", 0, [], [])
                ignore = sorted(set(time_side(REPO_ROOT, "codes", 0, [], [])) - set(old_codes))  # type: ignore[arg-type]
                results["ignored"] = ignore
                print(f"switched off in this tree (codes {args.against} did not have): {', '.join(ignore)}")
            for mode in ("once", "full"):
                old_runs, new_runs = [], []
                for _ in range(args.repeats):
                    old_runs.append(time_side(old_root, mode, args.rounds, files, []))
                    new_runs.append(time_side(REPO_ROOT, mode, args.rounds, files, ignore))
                summary = compare(merge(old_runs), merge(new_runs))
                results[mode] = summary
                print(
                    f"{mode}: {summary['files']} files, new/old per file median {summary['median']:.3f} "
                    f"(p10 {summary['p10']:.3f}, p90 {summary['p90']:.3f}); total {summary['total_old_s']:.2f} s "
                    f"→ {summary['total_new_s']:.2f} s; left out (the old converter rejects them): "
                    f"{', '.join(summary['left_out']) or 'none'}; slowest: {', '.join(summary['slowest'])}"  # type: ignore[arg-type]
                )
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(old_root)], check=False)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
