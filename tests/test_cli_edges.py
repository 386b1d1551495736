"""Edges of the command line, each run as users run it: the installed console script in a real
process (see tests/test_cli_process.py)."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli_process import accel_convert

#: Files that are not Python, none of which says "torch": each is refused, never echoed back.
NOT_PYTHON = {
    "syntax.py": (b"x = 1\ndef f(:\n    pass\n", "syntax.py:2:7: syntax error"),
    "null.py": (b"x = 1\x00\n", "null.py:1:6: syntax error: source contains a null byte"),
    "random.py": (bytes(range(256)) * 2, "random.py:1:"),
}


def test_file_that_is_not_python_is_refused_whether_or_not_it_mentions_torch(tmp_path: Path) -> None:
    for name, (source, _) in NOT_PYTHON.items():
        (tmp_path / name).write_bytes(source)
    (tmp_path / "valid.py").write_bytes(b"x = 1\n")
    (tmp_path / "torch_syntax.py").write_bytes(b"import torch\ndef f(:\n")
    names = [*NOT_PYTHON, "torch_syntax.py", "valid.py"]

    alone = accel_convert("syntax.py", cwd=tmp_path)
    assert alone.returncode == 123, alone.stderr.decode()
    assert alone.stdout == b""  # the file's bytes are not echoed back as "unchanged"
    assert alone.stderr.decode().splitlines()[0].startswith(NOT_PYTHON["syntax.py"][1])

    diff = accel_convert("--diff", *names, cwd=tmp_path)
    assert diff.returncode == 123, diff.stderr.decode()
    lines = diff.stderr.decode().splitlines()
    for _, expected in NOT_PYTHON.values():
        assert sum(line.startswith(expected) for line in lines) == 1, lines
    assert any(line.startswith("torch_syntax.py:2:7: syntax error") for line in lines), lines
    assert lines[-1] == "0 would convert, 1 unchanged, 4 failed", lines

    check = accel_convert("--check", *names, cwd=tmp_path)
    assert check.returncode == 123, check.stderr.decode()
    assert check.stderr.decode().splitlines()[-1] == "0 would convert, 1 unchanged, 4 failed"


#: ``Accelerator`` from modules the converter cannot see, in three shapes: each is left as written.
UNSEEN_ACCELERATORS = {
    "from mylib.accel import Accelerator\n\naccelerator = Accelerator()\n": ("2:1", "mylib.accel"),
    "from utils import Accelerator\n\n\ndef main():\n    accelerator = Accelerator()\n": ("2:1", "utils"),
    "import utils\n\n\nclass Trainer:\n    def __init__(self):\n        self.acc = utils.Accelerator()\n": (
        "7:20",
        "utils",
    ),
}

TRAINING = b"""
model = torch.nn.Linear(2, 2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(2, 2).cuda()).sum()
loss.backward()
optimizer.step()
"""


def test_accelerator_from_an_unseen_module_is_left_as_written_with_a_report(tmp_path: Path) -> None:
    for setup, (position, origin) in UNSEEN_ACCELERATORS.items():
        source = b"import torch\n" + setup.encode() + TRAINING
        run = accel_convert("-", "--stdin-filename", "train.py", stdin=source, cwd=tmp_path)
        stderr = run.stderr.decode()
        assert run.returncode == 0, stderr
        assert run.stdout == source, run.stdout.decode()
        assert f"train.py:{position}: ACC956 Accelerator is imported from {origin}," in stderr, stderr
        assert "internal error" not in stderr


def test_list_codes_is_one_line_per_code_and_the_examples_come_with_verbose(tmp_path: Path) -> None:
    from accel_convert.codemods.engine.registry import code_docs

    docs = code_docs()
    short = accel_convert("--list-codes", cwd=tmp_path)
    assert short.returncode == 0, short.stderr.decode()
    lines = short.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == [doc.code for doc in docs]
    for line, doc in zip(lines, docs, strict=True):
        kind = "rewrite" if doc.fixed else "report"
        assert line.startswith(f"{doc.code}  {doc.name} ({kind}): ") and len(line.split(": ", 1)[1]) > 10, line

    long = accel_convert("--list-codes", "-v", cwd=tmp_path)
    assert long.returncode == 0, long.stderr.decode()
    text = long.stdout.decode()
    assert all(line in text.splitlines() for line in lines)
    assert "    Before:" in text and "accelerator.backward(loss" in text
    assert len(text.splitlines()) > 10 * len(lines)


LOADER_SCRIPT = """import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
loader = DataLoader(data, batch_size={batch})
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def test_summary_says_what_the_batch_size_comes_to_on_several_processes(tmp_path: Path) -> None:
    said = {}
    for batch in ("64", "len(data) // 4"):
        source = LOADER_SCRIPT.format(batch=batch).encode()
        run = accel_convert("-", "--stdin-filename", "train.py", stdin=source, cwd=tmp_path)
        assert run.returncode == 0, run.stderr.decode()
        said[batch] = next(line for line in run.stderr.decode().splitlines() if "converted (" in line)
    assert said["64"] == (
        "train.py: converted (3 rewrites); batch 64 per process: 128 on 2 processes (--split-batches keeps 64 in all)"
    )
    # A batch size computed at run time: the general sentence.
    assert said["len(data) // 4"].endswith(
        "; each process takes a whole batch: the global batch grows with the number of processes"
        " (--split-batches keeps the original's)"
    )
