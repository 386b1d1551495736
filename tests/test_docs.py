"""The documentation: the generated pages agree with the rules, every relative link resolves, and the
README stays an entry page (the rest lives in docs/, see docs/contributing.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from accel_convert.codemods.engine.registry import code_aliases, code_docs
from accel_convert.converter import docs
from accel_convert.converter.docs import CODES, DOCS, GENERATED_PAGE, README, ROOT

#: A Markdown link or image target, and a reference-style definition.
LINK = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")

README_BUDGET_BYTES = 25 * 1024
LONGEST_README_LINE = 1_000


def markdown_files() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that name a file of the repository (no scheme, not a
    bare anchor), outside code blocks and code spans."""
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    targets = [first or second for first, second in LINK.findall(text)]
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)]


def test_generated_files_are_current() -> None:
    stale, orphans = docs.stale_files()
    assert not stale, f"out of date: {[str(path.relative_to(ROOT)) for path in stale]}; run `{docs.GENERATOR}`"
    assert not orphans, f"pages without a code: {[str(path.relative_to(ROOT)) for path in orphans]}"


def test_check_mode_reports_a_stale_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--check`` exits 1 on an edited page, a missing page and a page of a code that does not
    exist, and writing removes the orphan and restores the others (on a copy of the pages)."""
    codes = tmp_path / "docs" / "codes"
    codes.mkdir(parents=True)
    for page in CODES.glob("*.md"):
        (codes / page.name).write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    for name in ("README.md", "mkdocs.yml"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "docs" / "index.md").write_text((DOCS / "index.md").read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(docs, "README", tmp_path / "README.md")
    monkeypatch.setattr(docs, "MKDOCS", tmp_path / "mkdocs.yml")
    monkeypatch.setattr(docs, "DOCS", tmp_path / "docs")
    monkeypatch.setattr(docs, "CODES", codes)
    assert docs.main(["--check"]) == 0
    edited = codes / "ACC105.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nA sentence added by hand.\n", encoding="utf-8")
    (codes / "ACC102.md").unlink()
    (codes / "ACC999.md").write_text("# ACC999 gone\n", encoding="utf-8")
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0
    assert not (codes / "ACC999.md").exists()
    assert (codes / "ACC102.md").read_text(encoding="utf-8") == (CODES / "ACC102.md").read_text(encoding="utf-8")
    assert docs.main(["--check"]) == 0


def test_every_code_has_exactly_one_page_and_every_page_a_code() -> None:
    codes = {doc.code for doc in code_docs()}
    pages = {path.stem for path in CODES.glob("ACC*.md")}
    assert pages == codes | set(code_aliases())
    for code in codes:
        page = (CODES / f"{code}.md").read_text(encoding="utf-8")
        assert page.startswith(GENERATED_PAGE)
        assert re.search(rf"^# {code} ", page, re.MULTILINE), code


def test_each_code_page_shows_its_rule_and_examples() -> None:
    for doc in code_docs():
        page = (CODES / f"{doc.code}.md").read_text(encoding="utf-8")
        assert f"# {doc.code} {doc.name}\n" in page
        for section in ("## Why", "## What it leaves alone"):
            assert section in page, (doc.code, section)
        for example in doc.examples:
            if example.after and example.after != example.before:
                diff = docs.unified_diff(example.before, example.after)
                assert f"```diff\n{diff}\n```" in page, doc.code
                assert scripts_of(diff) == (example.before, example.after), doc.code
            else:
                assert example.before in page, doc.code
            assert example.message in page, doc.code
        # Docstrings' reStructuredText ``code`` is Markdown code on the pages, never doubled.
        prose = FENCE.sub("", page)
        assert "``" not in prose, doc.code


def scripts_of(diff: str) -> tuple[str, str]:
    """The two scripts a unified diff with whole-file context compares: a reader of the page
    sees every line of both."""
    body = diff.splitlines()[3:]  # ---, +++ and the one @@ line
    before = [line[1:] for line in body if line[:1] in " -"]
    after = [line[1:] for line in body if line[:1] in " +"]
    return "\n".join(before) + "\n", "\n".join(after) + "\n"


def test_every_code_cited_on_a_page_has_a_page() -> None:
    """A page that names a code (a former one too) can be followed to that code's page."""
    pages = {path.stem for path in CODES.glob("ACC*.md")}
    for path in markdown_files():
        cited = set(re.findall(r"\bACC\d{3}\b", path.read_text(encoding="utf-8")))
        assert cited <= pages, (str(path.relative_to(ROOT)), sorted(cited - pages))


def test_every_finding_page_says_how_to_fix_it() -> None:
    """A code left for a person (ACC9xx) tells that person what to change; a rewrite needs no fix."""
    for doc in code_docs():
        page = (CODES / f"{doc.code}.md").read_text(encoding="utf-8")
        assert ("## How to fix" in page) == doc.code.startswith("ACC9"), doc.code
        assert bool(doc.fix) == doc.code.startswith("ACC9"), doc.code


def test_code_pages_name_no_internals() -> None:
    """The pages are written for a person converting a script: no class of the converter's own
    (``RuleTransformer.evaluates``) appears in them."""
    internal = re.compile(r"\b(?:RuleTransformer|ScriptFacts|Rule|CodeDoc|Example)\.\w+")
    for path in CODES.glob("*.md"):
        found = internal.findall(path.read_text(encoding="utf-8"))
        assert not found, (path.name, found)


def test_the_nav_names_each_code() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for doc in code_docs():
        assert f'- "{doc.code} — {doc.name}": codes/{doc.code}.md\n' in nav, doc.code


def test_rst_code_and_lists_become_markdown() -> None:
    text = "Uses ``x.to(device)`` and :func:`syntax.is_host_number`; builds outside __init__:\n* one\n* two"
    assert docs.markdown_prose(text) == (
        "Uses `x.to(device)` and `is_host_number`; builds outside `__init__`:\n\n* one\n* two"
    )


def test_every_code_page_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for doc in code_docs():
        assert f"codes/{doc.code}.md\n" in nav, doc.code


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    for target in relative_links(path):
        file_part = target.split("#", 1)[0]
        resolved = (path.parent / file_part).resolve()
        assert resolved.exists(), f"{path.relative_to(ROOT)}: link to {target!r}, which does not exist"
        # The site holds docs/ only: a page linking outside it would be a dead link there.
        if path.is_relative_to(DOCS):
            assert resolved.is_relative_to(DOCS), f"{path.relative_to(ROOT)}: link to {target!r}, outside docs/"


def test_readme_links_only_into_docs() -> None:
    """The home page of the site is generated from the README, so its links must work from both."""
    for target in relative_links(README):
        assert target.startswith("docs/"), target


def test_readme_is_an_entry_page() -> None:
    raw = README.read_bytes()
    assert len(raw) <= README_BUDGET_BYTES, f"README.md is {len(raw)} bytes: move text into a page of docs/"
    longest = max(raw.decode("utf-8").splitlines(), key=len)
    assert len(longest) <= LONGEST_README_LINE, f"a README line of {len(longest)} characters: {longest[:80]}..."


def test_required_pages_exist() -> None:
    for page in (
        "runtime",
        "projects",
        "notebooks",
        "fsdp",
        "failures",
        "launching",
        "troubleshooting",
        "limitations",
        "performance",
        "cli",
        "contributing",
        "codes/index",
    ):
        assert (DOCS / f"{page}.md").is_file(), page


def test_ci_builds_the_site_with_packages_the_project_installs() -> None:
    """.ci/run installs the test extra and builds the site strictly, after the lint steps and
    before the tests."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, published as tomli (a dependency there)
        import tomli as tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0] for requirement in extra["test"]}
    assert {"mkdocs", "mkdocs-material"} <= names
    steps = [
        line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line and line[0] != "#"
    ]
    build = next(index for index, line in enumerate(steps) if "mkdocs build --strict" in line)
    assert steps.index("mypy") < build < steps.index("python -m pytest -q")
