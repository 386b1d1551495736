"""``convert_module(..., tree_only=True)``, what the pipeline's stability check runs: the same tree
as a full conversion, with the rules that can only report left out."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "fixtures" / "cases").glob("*.py"))
OPTION_SETS = {
    "runtime": Options(),
    "accelerate": Options(target="accelerate"),
    "backward-off": Options(ignore=("ACC105",)),
}


@pytest.mark.parametrize("options_name", sorted(OPTION_SETS))
def test_tree_only_converts_to_the_same_tree(options_name: str) -> None:
    options = OPTION_SETS[options_name]
    reported_only_fully = 0
    for script in SCRIPTS:
        source = script.read_bytes()
        full = convert_module(cst.parse_module(source), options, source)
        tree_only = convert_module(cst.parse_module(source), options, source, tree_only=True)
        assert tree_only.module.bytes == full.module.bytes, script.name
        reports = {change.code for change in full.changes if change.code.startswith("ACC9")}
        reported_only_fully += bool(reports - {change.code for change in tree_only.changes})
    # The comparison means something: reports were really left out.
    assert reported_only_fully > 3
