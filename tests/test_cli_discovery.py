"""Which files a folder search takes, as ruff and black choose them: ``.gitignore`` and
``.ignore`` (in the folder, below, and above it up to the repository root), virtual environments
and build folders skipped by default, ``--exclude`` / ``--extend-exclude`` on the command line and
in ``[tool.accel-convert]``, and a file named on the command line always taken.

Each test runs ``python -m accel_convert.converter --check -v`` in a real subprocess and reads the files it
names (``PATH: unchanged``), so what is checked is what the command really visits.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.launching import base_env

#: Any Python file: discovery does not care what it holds (and these convert to themselves).
PLAIN = b"import os\n"


def visited(*args: str | Path, cwd: Path) -> list[str]:
    """The files the command visited, as it names them, sorted."""
    result = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "--check", "-v", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return sorted(line.rsplit(": ", 1)[0] for line in result.stderr.splitlines() if line.endswith(": unchanged"))


def make_tree(root: Path, files: list[str], text: dict[str, str] | None = None) -> None:
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(PLAIN)
    for relative, content in (text or {}).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def test_gitignore_and_ignore_files_are_respected_like_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_tree(
        repo,
        [
            "src/train.py",
            "src/generated.py",
            "src/data/cache.py",
            "src/data/keep_cache.py",
            "src/pkg/local_only.py",
            "src/pkg/model.py",
            "src/scratch/try.py",
            "src/build/lib/copy.py",
            "src/dist/copy.py",
            "src/venv/lib/x.py",
            "src/env_named_anything/lib/y.py",
            "src/__pycache__/z.py",
            "src/thing.egg-info/w.py",
            "src/.hidden/h.py",
        ],
        {
            ".gitignore": "generated.py\n/src/scratch/\n",  # at the repository root, above the searched folder
            "src/data/.gitignore": "cache*.py\n!keep_cache.py\n",  # ! re-includes
            "src/pkg/.ignore": "local_only.py\n",  # ripgrep's and ruff's .ignore
            "src/env_named_anything/pyvenv.cfg": "home = /usr/bin\n",
        },
    )
    (repo / ".git").mkdir()
    expected = ["src/data/keep_cache.py", "src/pkg/model.py", "src/train.py"]
    assert visited("src", cwd=repo) == expected
    # Named on the command line: taken, whatever excludes it.
    assert visited("src", "src/generated.py", "src/build/lib/copy.py", cwd=repo) == sorted(
        [*expected, "src/generated.py", "src/build/lib/copy.py"]
    )
    # Ignore files switched off: they no longer hide anything; the default exclusions still apply.
    assert visited("--no-respect-gitignore", "src", cwd=repo) == sorted(
        [*expected, "src/generated.py", "src/data/cache.py", "src/pkg/local_only.py", "src/scratch/try.py"]
    )


def test_ignore_files_above_a_folder_stop_at_the_repository_root(tmp_path: Path) -> None:
    outside = tmp_path / "outer"
    make_tree(outside, ["repo/src/skipped_by_outer.py", "repo/src/kept.py"], {".gitignore": "skipped_by_outer.py\n"})
    (outside / "repo" / ".git").mkdir()
    # The .gitignore above the repository's root is not the repository's: it does not apply.
    assert visited("src", cwd=outside / "repo") == ["src/kept.py", "src/skipped_by_outer.py"]


def test_exclude_replaces_the_defaults_and_extend_exclude_adds(tmp_path: Path) -> None:
    make_tree(tmp_path, ["app/train.py", "app/legacy/old.py", "app/build/gen.py", "app/model_old.py"])
    assert visited("app", cwd=tmp_path) == ["app/legacy/old.py", "app/model_old.py", "app/train.py"]
    assert visited("app", "--extend-exclude", "legacy/,*_old.py", cwd=tmp_path) == ["app/train.py"]
    # --exclude replaces the default list: build/ is searched again.
    assert visited("app", "--exclude", "legacy/", cwd=tmp_path) == [
        "app/build/gen.py",
        "app/model_old.py",
        "app/train.py",
    ]
    # A pattern with a slash is anchored at the current folder.
    assert visited("app", "--extend-exclude", "app/legacy", cwd=tmp_path) == ["app/model_old.py", "app/train.py"]
    assert visited("app", "--extend-exclude", "legacy/old.py", cwd=tmp_path) == [
        "app/legacy/old.py",
        "app/model_old.py",
        "app/train.py",
    ]


def test_config_patterns_are_relative_to_their_pyproject_and_extend_the_command_line(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_tree(
        project,
        ["src/train.py", "src/legacy/old.py", "src/experiments/run.py", "src/build/gen.py"],
        {"pyproject.toml": '[tool.accel-convert]\nextend-exclude = ["src/legacy"]\n'},
    )
    # Run from inside src/: the configuration's anchored pattern still means project/src/legacy.
    assert visited(".", cwd=project / "src") == ["experiments/run.py", "train.py"]
    assert visited(".", "--extend-exclude", "experiments/", cwd=project / "src") == ["train.py"]
    (project / "pyproject.toml").write_text('[tool.accel-convert]\nexclude = ["experiments/"]\n', encoding="utf-8")
    assert visited(".", cwd=project / "src") == ["build/gen.py", "legacy/old.py", "train.py"]
    # The command line's --exclude wins over the configuration's.
    assert visited(".", "--exclude", "legacy/", cwd=project / "src") == [
        "build/gen.py",
        "experiments/run.py",
        "train.py",
    ]


def test_a_bad_exclude_setting_is_one_usage_error(tmp_path: Path) -> None:
    make_tree(tmp_path, ["train.py"], {"pyproject.toml": '[tool.accel-convert]\nexclude = "build/"\n'})
    result = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "--check", "."],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=base_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"accel-convert: error: {tmp_path / 'pyproject.toml'}: [tool.accel-convert] exclude must be a list of "
        "strings, got 'build/'"
    ]


def test_a_folder_without_python_files_says_so_and_converts_nothing(tmp_path: Path) -> None:
    # ruff and black warn and exit 0; before, one folder without -o was refused with "several
    # inputs need --in-place, -o DIR" and --check said nothing at all.
    make_tree(tmp_path, ["docs/readme.txt"])
    for flags in ([], ["--check"], ["-o", "out/"]):
        result = subprocess.run(
            [sys.executable, "-m", "accel_convert.converter", *flags, "docs"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=base_env(),
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, (flags, result.stderr)
        assert result.stderr.splitlines() == [
            "accel-convert: warning: no Python file found in docs (nothing to convert)"
        ]
        assert result.stdout == ""
    assert not (tmp_path / "out").exists()
