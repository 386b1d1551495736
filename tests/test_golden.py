"""Golden files: every fixtures/cases/*.py converted equals fixtures/expected/<name>.py, with the
options its sidecar names (``oom_retry``, ``target``; see fixtures/README.md), else the defaults.

Adding a case needs no test code: drop the input in fixtures/cases/, run
``pytest tests/test_golden.py --force-regen``, review the new fixtures/expected/<name>.py as a
person would review a hand conversion, and commit both.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from pathlib import Path

import pytest

from accel_convert.codemods.engine.model import Change, Options
from accel_convert.converter.pipeline import convert_source
from tests.launching import REPO_ROOT

CASES = sorted((REPO_ROOT / "fixtures" / "cases").glob("*.py"))
EXPECTED = REPO_ROOT / "fixtures" / "expected"


def convert(source: bytes, options: Options = Options()) -> tuple[bytes, list[Change]]:
    """What the command writes: the pipeline around the codemods, with its last check (a rewrite
    that would make the program fail is left out and reported, converter/guard.py)."""
    conversion = convert_source(source, options, path="<fixture>")
    return conversion.output, list(conversion.changes)


def options_for(case: Path, **overrides: object) -> Options:
    """The options the case's sidecar asks for (``fixtures/cases/<name>.json``)."""
    sidecar = case.with_suffix(".json")
    spec = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    chosen = {"oom_retry": spec.get("oom_retry", False), "target": spec.get("target", "runtime"), **overrides}
    return Options(**chosen)  # type: ignore[arg-type]


@cache
def converted(case: Path) -> tuple[bytes, tuple[Change, ...]]:
    output, changes = convert(case.read_bytes(), options_for(case))
    return output, tuple(changes)


def case_id(case: Path) -> str:
    return case.stem


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_conversion_matches_golden_file(case: Path, file_regression) -> None:
    output, _ = converted(case)
    file_regression.check(output, binary=True, fullpath=EXPECTED / case.name)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_golden_output_converts_to_itself(case: Path) -> None:
    output, _ = converted(case)
    again, changes = convert(output, options_for(case))
    assert again == output, "converting the converted script changed it"
    assert [c for c in changes if c.fixed] == [], "a converted script still has automatic rewrites pending"


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if b"import torch" not in c.read_bytes() and b"from torch" not in c.read_bytes()],
    ids=case_id,
)
def test_scripts_without_torch_come_back_byte_for_byte(case: Path) -> None:
    output, changes = converted(case)
    assert output == case.read_bytes()
    assert changes == ()


def _differing_lines(first: bytes, second: bytes) -> list[str]:
    diff = difflib.ndiff(first.decode("utf-8", "replace").splitlines(), second.decode("utf-8", "replace").splitlines())
    return [line for line in diff if line[:2] in {"- ", "+ "}]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_accelerate_target_differs_only_in_imports(case: Path) -> None:
    """Besides the import, the one difference: a model method that runs the model (a
    ``training_step``) goes through the runtime's ``accelerator.as_forward(model)``, which
    Accelerate lacks; there it is unwrapped and reported (ACC921). And where the processes take
    rank 0's random generators (ACC124): the runtime's ``accelerator.agree_random_state()`` is
    Accelerate's broadcasts of ``random``'s and NumPy's states and ``synchronize_rng_states``;
    ``PartialState().agree_random_state()`` on import is the broadcasts of the states, torch's too.
    And an evaluation whose counts are summed across processes iterates the runtime's
    ``accelerator.without_padding(loader)``, which Accelerate lacks: there, the loader itself. So
    does one whose lists are gathered as objects after it (``x = accelerator.gather_object(x)``):
    there, without a way to drop the padding from the lists, nothing is gathered (reported), and a
    helper holding it may get no ``accelerator`` parameter."""
    runtime_output, _ = convert(case.read_bytes(), options_for(case, target="runtime"))
    accelerate_output, _ = convert(case.read_bytes(), options_for(case, target="accelerate"))
    differing = _differing_lines(runtime_output, accelerate_output)
    unpadded = {line for line in differing if line.startswith("- ") and ".without_padding(" in line}
    plain_loops = {"+ " + _WITHOUT_PADDING.sub(r"\1", line[2:]) for line in unpadded}
    assert plain_loops <= set(differing), (unpadded, plain_loops)
    differing = [line for line in differing if line not in unpadded | plain_loops]
    lists_gathered = {
        line for line in differing if line.startswith("- ") and _GATHERED_LIST.fullmatch(line[2:].strip())
    }
    assert not lists_gathered or unpadded, lists_gathered
    differing = [line for line in differing if line not in lists_gathered]
    if lists_gathered:  # a helper left as written needs no accelerator handed to it
        handed = {line for line in differing if line.startswith("- ") and ", accelerator)" in line}
        plain = {"+ " + line[2:].replace(", accelerator)", ")") for line in handed}
        differing = [line for line in differing if line not in handed | plain]
    # Lines the diff shows taken out and put back as they were (its alignment around removed ones).
    moved = {line for line in differing if ("+ " if line[0] == "-" else "- ") + line[2:] in differing}
    differing = [line for line in differing if line not in moved]
    agreeing = [line for line in differing if _agrees_random_state(line)]
    assert (
        bool(agreeing)
        == any(line.startswith("- ") for line in agreeing)
        == any(_agrees_torch_state(line) for line in agreeing)
    ), agreeing
    for line in differing:
        text = line[2:].strip()
        package = "accel_convert.runtime" if line.startswith("- ") else "accelerate"
        if text.startswith((f"from {package} import ", f"from {package}.utils import ")) or line in agreeing:
            continue
        counterpart = (
            "+ " + line[2:].replace(".as_forward(", ".unwrap_model(")
            if line.startswith("- ")
            else "- " + line[2:].replace(".unwrap_model(", ".as_forward(")
        )
        assert ".as_forward(" in line + counterpart and counterpart in differing, line


#: ``accelerator.without_padding(loader)`` (any accelerator expression): group 1 is the loader.
_GATHERED_LIST = re.compile(r"(\w+) = [\w.]+\.gather_object\(\1\)")
_WITHOUT_PADDING = re.compile(r"[\w.]+\.without_padding\(([\w.]+)(?:, skip_empty=False)?\)")


def _agrees_torch_state(line: str) -> bool:
    """Accelerate's agreement of torch's generator: ``synchronize_rng_states`` where the
    accelerator is created, torch's state broadcast from rank 0 where a script draws on import."""
    return line.startswith("+ ") and (
        "synchronize_rng_states(" in line or ".set_rng_state(broadcast_object_list([" in line
    )


def _agrees_random_state(line: str) -> bool:
    """A line of either target's agreement of the random generators (ACC124)."""
    text = line[2:].strip()
    if line.startswith("- "):
        return text.endswith(".agree_random_state()")
    return text in ("import random", "import numpy") or (
        text.startswith("synchronize_rng_states(")
        or (".set" in text and "(broadcast_object_list([" in text and ".get" in text)
    )


#: Text each automatic rewrite's position must point at in the *original* file.
MARKERS = {
    "ACC105": ".backward(",
    "ACC106": "clip",
    "ACC107": ("print", "tqdm", "trange", "basicConfig", "setLevel", "display", "write"),
}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_changes_point_into_the_original_file(case: Path) -> None:
    lines = case.read_bytes().decode("utf-8", "replace").splitlines()
    _, changes = converted(case)
    assert list(changes) == sorted(changes, key=lambda c: (c.line, c.column, c.code))
    for change in changes:
        assert 1 <= change.line <= max(len(lines), 1), change
        marker = MARKERS.get(change.code)
        if marker is None:
            continue
        span = "\n".join(lines[change.line - 1 : change.end_line])
        start = lines[change.line - 1][change.column :]
        markers = marker if isinstance(marker, tuple) else (marker,)
        assert any(m in span for m in markers) and start.strip(), (change, span)
