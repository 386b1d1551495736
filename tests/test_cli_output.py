"""What the command shows people and tools, as a process: "would convert" when nothing is
written, ``--statistics``, warnings first and ``--warnings-only``, ``-q`` naming the files that
fail ``--check``, the progress bar (on a terminal only), ``--explain``, ``--output-format json``
exactly as documented, and ``--output-format sarif`` checked against SARIF 2.1.0's rules.

Every test runs ``python -m accel_convert.converter`` in a real subprocess (a terminal for the progress bar is a
real pseudo-terminal), and each launch is used for as many assertions as it can carry.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from accel_convert.codemods.engine.registry import code_docs
from tests.launching import REPO_ROOT, base_env

#: A script with rewrites and a finding left for a person (ACC901: no DataLoader to shard),
#: reported after the first rewrite's position.
MIXED = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"train loss {total / len(loader):.4f}")
"""

TRAIN = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for data, target in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
"""

READY = b"import os\n\nprint(os.getcwd())\n"

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FINDING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<column>\d+): (?P<code>ACC\d{3}|stale-output) ")


def accel_convert(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = base_env(env)
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"):
        run_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=run_env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mixed.py").write_bytes(MIXED)
    (tmp_path / "train.py").write_bytes(TRAIN)
    (tmp_path / "ready.py").write_bytes(READY)
    return tmp_path


def findings_of(stderr: str) -> list[re.Match[str]]:
    return [match for line in stderr.splitlines() if (match := FINDING.match(line))]


# -- nothing written: "would convert" ---------------------------------------------------------------


def test_diff_and_check_say_would_convert_and_write_nothing(project: Path) -> None:
    before = {path.name: path.read_bytes() for path in project.iterdir()}
    diff = accel_convert("--diff", "-v", ".", cwd=project)
    assert diff.returncode == 0, diff.stderr
    summary = diff.stderr.splitlines()[-1]
    assert summary.startswith("2 would convert, 1 unchanged, 0 failed"), summary
    assert "converted" not in diff.stderr, diff.stderr
    assert "mixed.py: would convert" in diff.stderr and "ready.py: unchanged" in diff.stderr
    assert diff.stdout.count("+++ b/") == 2
    assert {path.name: path.read_bytes() for path in project.iterdir()} == before

    written = accel_convert("-o", project / "out", ".", cwd=project)
    assert written.stderr.splitlines()[-1].startswith("2 converted, 1 unchanged, 0 failed")


# -- warnings first, --warnings-only, --statistics, -q ----------------------------------------------


def test_warnings_come_first_and_warnings_only_shows_nothing_else(project: Path) -> None:
    every = accel_convert("--check", "-v", "mixed.py", cwd=project)
    codes = [match["code"] for match in findings_of(every.stderr)]
    assert "ACC901" in codes and any(code.startswith("ACC1") for code in codes)
    warnings = [code for code in codes if code.startswith("ACC9")]
    assert codes[: len(warnings)] == warnings, "a file's warnings are printed before its rewrites"

    only = accel_convert("--check", "--warnings-only", ".", cwd=project)
    assert only.returncode == 1  # the pending rewrites still fail the check
    shown = [match["code"] for match in findings_of(only.stderr)]
    assert shown and all(code.startswith("ACC9") for code in shown), only.stderr
    assert only.stderr.splitlines()[-1].startswith("2 would convert, 1 unchanged, 0 failed")

    as_json = accel_convert("--check", "--warnings-only", "--output-format", "json", ".", cwd=project)
    assert {finding["code"][:4] for finding in json.loads(as_json.stdout)} == {"ACC9"}

    # --select ACC9 runs only the checks for a person: nothing to rewrite, the check passes.
    selected = accel_convert("--check", "--select", "ACC9", "mixed.py", cwd=project)
    assert selected.returncode == 0
    assert [match["code"] for match in findings_of(selected.stderr)] == warnings


def test_statistics_count_every_finding_per_code(project: Path) -> None:
    listed = accel_convert("--check", "-v", ".", cwd=project)
    expected = Counter(match["code"] for match in findings_of(listed.stderr))
    stats = accel_convert("--check", "--statistics", ".", cwd=project)
    assert stats.returncode == 1
    assert findings_of(stats.stderr) == [], "statistics replace the line per finding"
    rows = [line.split() for line in stats.stderr.splitlines()[:-1]]
    counted = {row[1]: int(row[0]) for row in rows}
    assert counted == dict(expected)
    names = {doc.code: doc.name for doc in code_docs()}
    for row in rows:
        assert row[2] == ("[person]" if row[1].startswith("ACC9") else "[rewrite]")
        assert row[3] == names[row[1]]
    counts = [int(row[0]) for row in rows]
    assert counts == sorted(counts, reverse=True), "most frequent first"


def test_quiet_check_still_names_the_files_that_fail(project: Path) -> None:
    quiet = accel_convert("--check", "-q", ".", cwd=project)
    assert quiet.returncode == 1
    assert sorted(quiet.stderr.splitlines()) == ["mixed.py: would convert", "train.py: would convert"]
    assert quiet.stdout == ""
    clean = accel_convert("--check", "-q", "ready.py", cwd=project)
    assert (clean.returncode, clean.stderr) == (0, "")


# -- the progress bar: a terminal and enough files, never on a pipe --------------------------------


def run_on_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run the command with stderr on a pseudo-terminal (stdout on a pipe); its exit code and
    everything it wrote to the terminal."""
    leader, follower = pty.openpty()
    env = base_env({"COLUMNS": "100", "TERM": "xterm-256color"})
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "accel_convert.converter", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
    )
    os.close(follower)
    received = bytearray()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end closed: the process is done with the terminal
                break
            if not chunk:
                break
            received += chunk
        elif process.poll() is not None:
            break
    process.communicate(timeout=60)
    os.close(leader)
    return process.returncode, received.decode("utf-8", errors="replace")


def test_progress_bar_on_a_terminal_for_many_files_only(tmp_path: Path) -> None:
    for number in range(8):
        (tmp_path / f"train_{number}.py").write_bytes(TRAIN)
    code, terminal = run_on_terminal(["--check", "."], tmp_path)
    assert code == 1
    plain = ANSI_ESCAPE.sub("", terminal)
    assert re.search(r"converting .*\d/8", plain), terminal
    # The findings and the summary still reach the terminal whole, each on its own line.
    # What stays on screen: a carriage return starts the line over (the bar redraws that way).
    lines = [line.rstrip("\r").split("\r")[-1] for line in plain.split("\n")]
    assert sum(1 for line in lines if re.fullmatch(r"train_\d\.py: would convert \(3 rewrites\)", line)) == 8, plain
    assert any(line.startswith("8 would convert, 0 unchanged, 0 failed") for line in lines), plain

    few_code, few = run_on_terminal(["--check", "train_0.py", "train_1.py"], tmp_path)
    assert few_code == 1 and "converting" not in few and "2 would convert" in ANSI_ESCAPE.sub("", few)

    piped = accel_convert("--check", ".", cwd=tmp_path)
    assert "converting" not in piped.stderr and "\x1b" not in piped.stderr


# -- --explain ------------------------------------------------------------------------------------


def test_explain_prints_the_rules_why_and_its_examples(tmp_path: Path) -> None:
    docs = {doc.code: doc for doc in code_docs()}
    rewrite = accel_convert("--explain", "acc105", cwd=tmp_path)
    assert rewrite.returncode == 0, rewrite.stderr
    text = rewrite.stdout
    doc = docs["ACC105"]
    assert text.startswith(f"ACC105 {doc.name} (automatic rewrite)\n")
    # The why: the rule module's docstring, not only its one-line summary.
    module_doc = sys.modules["accel_convert.codemods.rewrites.backward"].__doc__ or ""
    why_sentence = " ".join(module_doc.split("\n\n")[1].split()[:6]).replace("``", "`")
    assert why_sentence in " ".join(text.split())
    for row in (doc.before.splitlines()[0], doc.after.splitlines()[-1]):
        assert row.strip() in text
    assert "Before:" in text and "After:" in text

    report_code = next(code for code, doc in docs.items() if not doc.fixed and doc.message)
    reported = accel_convert("--explain", report_code, cwd=tmp_path)
    assert reported.returncode == 0
    assert "(reported, left for a person)" in reported.stdout.splitlines()[0]
    assert f"Reported: {report_code} {docs[report_code].message}" in reported.stdout

    by_name = accel_convert("--explain", "metrics", cwd=tmp_path)
    assert by_name.returncode == 0 and by_name.stdout.startswith("ACC113 metrics (automatic rewrite)\n")

    unknown = accel_convert("--explain", "ACC999", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr == (
        "accel-convert: error: --explain ACC999: no such code or name (see accel-convert --list-codes)\n"
    )


# -- --output-format json, as docs/cli.md documents it --------------------------------------------


def documented_json_fields() -> list[str]:
    """The fields the command-line page (docs/cli.md) names for ``--output-format json``."""
    page = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `--output-format json`"))
    return re.findall(r"`(\w+)`", row.split("|")[2])


def test_json_is_one_array_with_exactly_the_documented_fields(project: Path) -> None:
    result = accel_convert("--check", "--output-format", "json", ".", cwd=project)
    assert result.returncode == 1
    findings = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert isinstance(findings, list) and findings
    fields = documented_json_fields()
    assert fields == ["code", "message", "filename", "line", "column", "end_line", "end_column", "fixed", "help"]
    for finding in findings:
        assert list(finding) == fields
        assert isinstance(finding["fixed"], bool) and finding["fixed"] == finding["code"].startswith("ACC1")
        assert finding["help"] is None if finding["fixed"] else isinstance(finding["help"], str) and finding["help"]
        assert finding["line"] >= 1 and finding["column"] >= 1
    text_positions = {(m["file"], int(m["line"]), int(m["column"]), m["code"]) for m in findings_of(result.stderr)}
    assert text_positions == set(), "json findings are not also printed as text"
    listed = accel_convert("--check", "-v", ".", cwd=project)
    assert sorted((f["filename"], f["line"], f["column"], f["code"]) for f in findings) == sorted(
        (m["file"], int(m["line"]), int(m["column"]), m["code"]) for m in findings_of(listed.stderr)
    )
    empty = accel_convert("--check", "--output-format", "json", "ready.py", cwd=project)
    assert (empty.returncode, json.loads(empty.stdout)) == (0, [])


# -- --output-format sarif -------------------------------------------------------------------------

#: For each SARIF 2.1.0 object we emit: its required properties and every property the schema
#: allows (the schema's objects have ``additionalProperties: false``). From the OASIS schema
#: (sarif-schema-2.1.0.json), the parts this tool's output uses.
SARIF_OBJECTS: dict[str, tuple[set[str], set[str]]] = {
    "log": ({"version", "runs"}, {"$schema", "version", "runs", "inlineExternalProperties", "properties"}),
    "run": (
        {"tool"},
        {"tool", "invocations", "results", "artifacts", "originalUriBaseIds", "columnKind", "properties"},
    ),
    "tool": ({"driver"}, {"driver", "extensions", "properties"}),
    "driver": (
        {"name"},
        {"name", "version", "semanticVersion", "informationUri", "rules", "notifications", "fullName", "properties"},
    ),
    "rule": (
        {"id"},
        {
            "id",
            "name",
            "shortDescription",
            "fullDescription",
            "help",
            "helpUri",
            "defaultConfiguration",
            "properties",
        },
    ),
    "message": (set(), {"text", "markdown", "id", "arguments", "properties"}),
    "multiformat": ({"text"}, {"text", "markdown", "properties"}),
    "configuration": (set(), {"enabled", "level", "rank", "parameters", "properties"}),
    "result": (
        {"message"},
        {"ruleId", "ruleIndex", "rule", "kind", "level", "message", "locations", "fixes", "properties"},
    ),
    "location": (set(), {"id", "physicalLocation", "logicalLocations", "message", "annotations", "properties"}),
    "physicalLocation": (set(), {"address", "artifactLocation", "region", "contextRegion", "properties"}),
    "artifactLocation": (set(), {"uri", "uriBaseId", "index", "description", "properties"}),
    "region": (
        set(),
        {"startLine", "startColumn", "endLine", "endColumn", "charOffset", "charLength", "snippet", "properties"},
    ),
    "invocation": (
        {"executionSuccessful"},
        {"executionSuccessful", "toolExecutionNotifications", "exitCode", "commandLine", "properties"},
    ),
    "notification": ({"message"}, {"message", "level", "locations", "descriptor", "properties"}),
}
SARIF_LEVELS = {"none", "note", "warning", "error"}


def check_object(kind: str, value: Any) -> None:
    required, allowed = SARIF_OBJECTS[kind]
    assert isinstance(value, dict), f"{kind} must be an object"
    assert required <= set(value), f"{kind} lacks {required - set(value)}"
    assert set(value) <= allowed, f"{kind} has properties SARIF 2.1.0 does not allow: {set(value) - allowed}"
    if kind == "message":  # the schema: anyOf text or id
        assert "text" in value or "id" in value


def check_location(location: Any) -> None:
    check_object("location", location)
    physical = location["physicalLocation"]
    check_object("physicalLocation", physical)
    check_object("artifactLocation", physical["artifactLocation"])
    assert isinstance(physical["artifactLocation"]["uri"], str)
    region = physical["region"]
    check_object("region", region)
    for key, number in region.items():
        assert isinstance(number, int) and number >= 1, f"region {key} must be an integer >= 1"


def check_sarif(log: Any) -> None:
    """The log's structure against the rules of SARIF 2.1.0 for what it contains."""
    check_object("log", log)
    assert log["version"] == "2.1.0" and isinstance(log["runs"], list)
    for run in log["runs"]:
        check_object("run", run)
        check_object("tool", run["tool"])
        driver = run["tool"]["driver"]
        check_object("driver", driver)
        ids = []
        for rule in driver["rules"]:
            check_object("rule", rule)
            ids.append(rule["id"])
            for key in ("shortDescription", "fullDescription", "help"):
                if key in rule:
                    check_object("multiformat", rule[key])
            check_object("configuration", rule["defaultConfiguration"])
            assert rule["defaultConfiguration"]["level"] in SARIF_LEVELS
        assert len(ids) == len(set(ids)), "rule ids are unique"
        for invocation in run["invocations"]:
            check_object("invocation", invocation)
            assert isinstance(invocation["executionSuccessful"], bool)
            for notification in invocation["toolExecutionNotifications"]:
                check_object("notification", notification)
                check_object("message", notification["message"])
                for location in notification["locations"]:
                    check_location(location)
        for result in run["results"]:
            check_object("result", result)
            check_object("message", result["message"])
            assert result["level"] in SARIF_LEVELS
            # ruleIndex, when present, must point at the rule named by ruleId.
            assert ids[result["ruleIndex"]] == result["ruleId"]
            for location in result["locations"]:
                check_location(location)


def test_sarif_log_holds_every_rule_and_each_finding_at_its_position(project: Path) -> None:
    (project / "broken.py").write_bytes(b"import torch\ndef f(:\n")
    result = accel_convert("--check", "--output-format", "sarif", ".", cwd=project)
    assert result.returncode == 123  # broken.py fails; the others are still reported
    log = json.loads(result.stdout)
    check_sarif(log)
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "accel-convert"
    rules = {rule["id"]: rule for rule in driver["rules"]}
    for doc in code_docs():
        rule = rules[doc.code]
        assert rule["name"] == doc.name and rule["shortDescription"]["text"] == doc.summary.replace("``", "`")
        assert "``" not in rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] == ("note" if doc.fixed else "warning")

    listed = accel_convert("--check", "-v", ".", cwd=project)
    expected = sorted((m["file"], int(m["line"]), int(m["column"]), m["code"]) for m in findings_of(listed.stderr))
    got = []
    for found in run["results"]:
        region = found["locations"][0]["physicalLocation"]["region"]
        uri = found["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        got.append((uri, region["startLine"], region["startColumn"], found["ruleId"]))
        assert found["level"] == ("warning" if found["ruleId"].startswith("ACC9") else "note")
    assert sorted(got) == expected
    assert {"ACC901", "ACC105"} <= {code for *_, code in got}

    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    (failure,) = invocation["toolExecutionNotifications"]
    assert failure["level"] == "error"
    assert failure["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"
    assert failure["locations"][0]["physicalLocation"]["region"]["startLine"] == 2


def test_sarif_checker_rejects_what_the_schema_rejects() -> None:
    """The checker above must be able to fail: each broken log is refused."""
    region = {"startLine": 3, "startColumn": 1, "endLine": 3, "endColumn": 5}
    location = {"physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": region}}
    good = {
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "x", "rules": [{"id": "A", "defaultConfiguration": {"level": "note"}}]}},
                "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": []}],
                "results": [
                    {"ruleId": "A", "ruleIndex": 0, "level": "note", "message": {"text": "m"}, "locations": [location]}
                ],
            }
        ],
    }
    check_sarif(good)
    broken = [
        lambda log: log.pop("version"),
        lambda log: log["runs"][0]["tool"]["driver"].pop("name"),
        lambda log: log["runs"][0]["results"][0].pop("message"),
        lambda log: log["runs"][0]["results"][0].update(level="info"),
        lambda log: log["runs"][0]["results"][0].update(severity="high"),
        lambda log: log["runs"][0]["results"][0].update(ruleIndex=1),
        lambda log: region.update(startColumn=0),
        lambda log: log["runs"][0]["invocations"][0].pop("executionSuccessful"),
    ]
    for breaking in broken:
        log = json.loads(json.dumps(good))
        region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
        breaking(log)
        with pytest.raises((AssertionError, IndexError, KeyError)):
            check_sarif(log)


def test_a_former_code_split_in_one_per_reason_still_selects_and_explains_them(tmp_path: Path) -> None:
    """ACC913 was every evaluation left as written; now each reason has its code and ACC913 is
    their alias in --select/--ignore and the config."""
    script = REPO_ROOT / "fixtures" / "cases" / "streaming_eval.py"
    reported = accel_convert("--check", "--output-format", "json", str(script), cwd=tmp_path)
    codes = {finding["code"] for finding in json.loads(reported.stdout)}
    assert "ACC953" in codes
    ignored = accel_convert("--check", "--output-format", "json", "--ignore", "ACC913", str(script), cwd=tmp_path)
    assert "ACC953" not in {finding["code"] for finding in json.loads(ignored.stdout)}
    (tmp_path / "pyproject.toml").write_text('[tool.accel-convert]\nselect = ["ACC913"]\n')
    (tmp_path / "eval.py").write_bytes(script.read_bytes())
    selected = accel_convert("--check", "--output-format", "json", "eval.py", cwd=tmp_path)
    assert {finding["code"] for finding in json.loads(selected.stdout)} == {"ACC953"}

    explained = accel_convert("--explain", "ACC913", cwd=tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "ACC953 metrics-unsized-stream" in explained.stdout and "ACC938 metrics-comprehension" in explained.stdout
