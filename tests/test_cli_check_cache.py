"""``--check``'s cache (accel_convert/converter/cache.py).

A second ``--check`` of files nobody changed reads every result from the cache (no file is
converted) and prints the same stdout and stderr with the same exit code; a change to a file, to a
local module it imports, to the options or to accel-convert's version is a miss; an entry that
cannot be trusted is a miss, never a crash; ``--no-cache`` neither reads nor writes;
``ACCEL_CONVERT_CACHE_DIR``, ``XDG_CACHE_HOME`` and ``HOME`` choose the folder. Conversions are
counted by wrapping the converter's entry points: no timing is asserted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_convert.converter import cache, cli, parallel
from tests.launching import REPO_ROOT

CASES = REPO_ROOT / "fixtures" / "cases"
#: Fixture cases with rewrites and warnings (ACC9xx) to report.
CASE_NAMES = ("wrapped_dataloader_tutorial", "accelerator_device", "accel_flag_cudnn")
HELPERS = b"""import torch


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


def make_folder(root: Path) -> Path:
    """Fixture cases, a program of two modules, a script importing a local module without torch,
    a file without torch and one that does not parse."""
    folder = root / "src"
    folder.mkdir()
    for name in CASE_NAMES:
        shutil.copy(CASES / f"{name}.py", folder / f"{name}.py")
    (folder / "main.py").write_bytes(b"import torch\nfrom helpers import train\n\ntrain(torch.nn.Linear(2, 2), [])\n")
    (folder / "helpers.py").write_bytes(HELPERS)
    (folder / "settings.py").write_bytes(b"LR = 0.1\n")
    shutil.copy(CASES / "wrapped_dataloader_tutorial.py", folder / "tuned.py")
    with (folder / "tuned.py").open("ab") as stream:
        stream.write(b"\nfrom settings import LR\n")
    (folder / "plain.py").write_bytes(b"print('no torch here')\n")
    (folder / "broken.py").write_bytes(b"import torch\ndef train(:\n    pass\n")
    return folder


class Counted:
    """The files the command converted itself (not read from the cache)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files: list[str] = []
        convert_source, convert_program_files = cli.convert_source, cli.convert_program_files

        def counted_source(source, options, *, path):
            self.files.append(path)
            return convert_source(source, options, path=path)

        def counted_program(files, sources, options):
            self.files.extend(str(file.path) for file in files)
            return convert_program_files(files, sources, options)

        monkeypatch.setattr(cli, "convert_source", counted_source)
        monkeypatch.setattr(cli, "convert_program_files", counted_program)

    def names(self) -> set[str]:
        converted = {Path(file).name for file in self.files}
        self.files.clear()
        return converted


def check(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["--check", "--jobs", "1", *map(str, args)], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return make_folder(tmp_path)


ALL = {f"{name}.py" for name in CASE_NAMES} | {
    "main.py",
    "helpers.py",
    "settings.py",
    "tuned.py",
    "plain.py",
    "broken.py",
}


@pytest.mark.parametrize("flags", [(), ("-v",), ("--output-format", "json"), ("--statistics", "--strict")])
def test_a_hit_prints_the_same_and_converts_nothing(folder: Path, counted: Counted, flags: tuple[str, ...]) -> None:
    first = check(*flags, folder)
    assert counted.names() == ALL
    assert first[0] == cli.EXIT_FAILED  # broken.py
    second = check(*flags, folder)
    assert second == first
    assert counted.names() == {"broken.py"}  # a failure is not cached: converted and reported again


def test_a_hit_gives_exit_1_and_0_as_without_cache(folder: Path, counted: Counted) -> None:
    (folder / "broken.py").unlink()
    pending = check(folder / "accelerator_device.py")
    assert pending[0] == cli.EXIT_FINDINGS and check(folder / "accelerator_device.py") == pending
    ready = check(folder / "plain.py")
    assert ready[0] == cli.EXIT_OK and check(folder / "plain.py") == ready
    counted.names()
    assert check(folder / "accelerator_device.py") == pending and counted.names() == set()


def test_a_changed_file_is_converted_again(folder: Path, counted: Counted) -> None:
    check(folder)
    counted.names()
    with (folder / "accelerator_device.py").open("ab") as stream:
        stream.write(b"\nprint('changed')\n")
    check(folder)
    assert counted.names() == {"accelerator_device.py", "broken.py"}


def test_a_changed_local_module_misses_for_the_file_importing_it(folder: Path, counted: Counted) -> None:
    check(folder)
    counted.names()
    (folder / "settings.py").write_bytes(b"LR = 0.2\n")
    check(folder)
    assert counted.names() == {"settings.py", "tuned.py", "broken.py"}
    (folder / "helpers.py").write_bytes(HELPERS.replace(b"lr=0.1", b"lr=0.2"))
    check(folder)
    assert counted.names() == {"main.py", "helpers.py", "broken.py"}  # the program, converted as one


@pytest.mark.parametrize(
    "option", [("--split-batches",), ("--target", "accelerate"), ("--fsdp",), ("--oom-retry",), ("--ignore", "ACC9")]
)
def test_other_options_miss(folder: Path, counted: Counted, option: tuple[str, ...]) -> None:
    check(folder)
    counted.names()
    with_option = check(*option, folder)
    assert counted.names() == ALL
    assert check(*option, folder) == with_option
    assert counted.names() == {"broken.py"}


def test_another_version_misses(folder: Path, counted: Counted, monkeypatch: pytest.MonkeyPatch) -> None:
    check(folder)
    counted.names()
    monkeypatch.setattr(cli, "tool_version", lambda: "99.0")
    check(folder)
    assert counted.names() == ALL


def entries(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.json"))


def spoil(entries_found: list[Path]) -> None:
    """Every way an entry can be wrong, one per entry."""
    damages = [
        lambda data: data[: len(data) // 2],  # truncated
        lambda data: b"",
        lambda data: data[:-5] + b"XXXXX",  # its digest no longer matches
        lambda data: b"\x00\xff" * 40,
        lambda data: data.replace(b'"fixed"', b'"fixed"'),  # untouched: one entry stays good
    ]
    for index, entry in enumerate(entries_found):
        entry.write_bytes(damages[index % len(damages)](entry.read_bytes()))


def rehashed(body: bytes) -> bytes:
    return cache._digest(body).encode() + b"\n" + body


def test_corrupt_entries_are_misses(folder: Path, counted: Counted) -> None:
    first = check(folder)
    counted.names()
    found = entries(Path(cache.cache_folder()))
    assert len(found) == len(ALL) - 1 - 1  # every file but broken.py; main.py and helpers.py are one entry
    spoil(found)
    assert check(folder) == first
    converted = counted.names()
    assert "broken.py" in converted and len(converted) > 2
    assert check(folder) == first  # the spoiled entries were written again
    assert counted.names() == {"broken.py"}


@pytest.mark.parametrize(
    "replace",
    [
        (b'"version": "', b'"version": "0.0.0-'),  # another version's entry under this key
        (b'"format": 1', b'"format": 2'),
        (b'"key": "', b'"key": "0'),
        (b'"changes": [', b'"changes": [["ACC1", "x", "1", 0, 1, 0, true], '),  # a position that is text
        (b'"has_loader": ', b'"has_loader": 3, "x": '),
        (b'"files": [', b'"files": [{}, '),
    ],
)
def test_entries_that_are_whole_but_wrong_are_misses(
    folder: Path, counted: Counted, replace: tuple[bytes, bytes]
) -> None:
    target = folder / "accelerator_device.py"
    first = check(target)
    (entry,) = entries(Path(cache.cache_folder()))
    body = entry.read_bytes().partition(b"\n")[2]
    assert replace[0] in body
    entry.write_bytes(rehashed(body.replace(replace[0], replace[1], 1)))
    counted.names()
    assert check(target) == first
    assert counted.names() == {"accelerator_device.py"}


def test_no_cache_neither_reads_nor_writes(folder: Path, counted: Counted) -> None:
    first = check("--no-cache", folder)
    assert entries(Path(cache.cache_folder())) == []
    check(folder)
    counted.names()
    assert check("--no-cache", folder) == first
    assert counted.names() == ALL


def test_the_cache_folder(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = folder / "accelerator_device.py"
    monkeypatch.setenv(cache.CACHE_DIR_VARIABLE, str(tmp_path / "chosen"))
    check(target)
    assert len(entries(tmp_path / "chosen")) == 1
    monkeypatch.delenv(cache.CACHE_DIR_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    check(target)
    assert len(entries(tmp_path / "xdg" / "accel-convert")) == 1
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG specification: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    check(target)
    assert len(entries(tmp_path / "home" / ".cache" / "accel-convert")) == 1
    assert not (tmp_path / "relative").exists()


def test_an_unwritable_cache_folder_changes_nothing(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setenv(cache.CACHE_DIR_VARIABLE, str(tmp_path / "file" / "below"))
    first = check(folder)
    assert check(folder) == first


def test_a_stale_output_is_judged_now(folder: Path) -> None:
    """``--check -o OUT``: the cache keeps the conversion; OUT is compared with it on every run."""
    source, output = folder / "accelerator_device.py", folder / "out.py"
    missing = check(source, "-o", output)
    assert missing[0] == cli.EXIT_FINDINGS
    CliRunner().invoke(cli.main, [str(source), "-o", str(output)], catch_exceptions=False)
    assert check(source, "-o", output)[0] == cli.EXIT_OK
    output.write_bytes(b"stale\n")
    assert check(source, "-o", output)[0] == cli.EXIT_FINDINGS


def test_files_found_need_no_worker(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "broken.py").unlink()
    first = CliRunner().invoke(cli.main, ["--check", "--jobs", "2", str(folder)])
    given: list[int] = []
    start = parallel.start

    def recorded(jobs, plan_jobs, options):
        given.append(len(plan_jobs))
        return start(jobs, plan_jobs, options)

    monkeypatch.setattr(parallel, "start", recorded)
    second = CliRunner().invoke(cli.main, ["--check", "--jobs", "2", str(folder)])
    assert (second.exit_code, second.stdout, second.stderr) == (first.exit_code, first.stdout, first.stderr)
    assert given == [0]


def test_the_version_in_keys_is_the_installed_one() -> None:
    """The keys read ``accel_convert.__version__`` (no importlib.metadata at every run); pyproject.toml
    takes the version from there, so the two cannot differ."""
    from importlib.metadata import version

    assert cache.tool_version().split("+")[0] == version("accel-convert")


def test_an_edit_of_the_converters_own_code_is_another_version(tmp_path: Path) -> None:
    """An editable install changes between versions: entries written before an edit of a rule
    are not this code's."""
    package = tmp_path / "accel_convert"
    package.mkdir()
    (package / "rule.py").write_text("X = 1\n")
    before = cache.code_stamp(package)
    assert cache.code_stamp(package) == before  # stable while nothing changes
    (package / "rule.py").write_text("X = 22\n")
    assert cache.code_stamp(package) != before
    assert cache.tool_version().endswith("+" + cache.code_stamp(cache.PACKAGE))


def test_a_file_naming_a_local_module_only_inside_a_word_imports_nothing(tmp_path: Path) -> None:
    """The words test before parsing (project.may_import_locally): ``import engine`` names a
    module of the folder; ``engine_speed = 1`` does not, and a module named in UTF-8 letters is found."""
    from accel_convert.converter.project import may_import_locally, program_files

    (tmp_path / "engine.py").write_bytes(b"X = 1\n")
    (tmp_path / "déjà.py").write_bytes(b"Y = 2\n")
    assert may_import_locally(b"import engine\n", [tmp_path])
    assert may_import_locally(b"from engine.sub import x\n", [tmp_path])
    assert not may_import_locally(b"engine_speed = 1\nmyengine = 2\n", [tmp_path])
    assert may_import_locally("import déjà\n".encode(), [tmp_path])
    (tmp_path / "train.py").write_bytes("import torch\nimport déjà\n".encode())
    assert [file.module for file in program_files(tmp_path / "train.py")] == ["train", "déjà"]
