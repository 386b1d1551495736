"""The converter on code it was not written for: a fixed sample of the standard library.

Real-world Python is far more varied than training scripts; the converter must never crash on it,
never produce code that does not parse, and never touch a file that has nothing to do with torch.
The sample is deterministic (evenly spread over file sizes), so a failure always reproduces.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from accel_convert import codemods
from benchmarks.convert_speed import STDLIB, stdlib_files  # the same corpus the benchmark runs in full
from accel_convert.codemods.engine.model import Options
from accel_convert.converter.pipeline import convert_source

SAMPLE_SIZE = 40
#: Above this the sample would spend the test budget on a handful of huge files.
MAX_BYTES = 40_000


def spread_sample(files: list[Path], count: int) -> list[Path]:
    """``count`` files at evenly spaced ranks of size, so small and large files are both in."""
    sized = sorted((path.stat().st_size, str(path)) for path in files if 0 < path.stat().st_size <= MAX_BYTES)
    step = len(sized) / count
    return [Path(sized[int(index * step)][1]) for index in range(count)]


SAMPLE = spread_sample(stdlib_files(), SAMPLE_SIZE)
#: Every pass on every sampled file costs ~20 s on the CI machine: every third one (still spread
#: over sizes) runs as a torch script.
FORCED = set(SAMPLE[::3])


def test_the_sample_spreads_over_sizes() -> None:
    sizes = [path.stat().st_size for path in SAMPLE]
    assert len(set(SAMPLE)) == SAMPLE_SIZE
    assert min(sizes) < 1_000 and max(sizes) > 20_000


@pytest.mark.parametrize("path", SAMPLE, ids=lambda path: str(path.relative_to(STDLIB)))
def test_stdlib_file_survives_conversion(path: Path) -> None:
    source = path.read_bytes()
    name = str(path)

    # As a user would run it: a file without torch comes back byte for byte.
    as_is = convert_source(source, Options(), path=name)
    if b"torch" not in source:
        assert as_is.output == source

    # The codemods themselves, past the cheap byte check, must leave non-torch code alone too.
    module = cst.parse_module(source)
    assert codemods.convert_module(module, Options()).module.bytes == source

    # Marked as a torch script, every pass runs on it: no crash, and the result parses and is
    # stable (convert_source verifies both and raises if not).
    if path in FORCED:
        torch_script = source.rstrip(b"\n") + b"\nimport torch\n"
        converted = convert_source(torch_script, Options(), path=name)
        cst.parse_module(converted.output)
