"""Jupyter notebooks: code cells converted as one program, the rest kept; ``notebook_launcher``
starting a converted training function on 2 CPU processes from a real Jupyter kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from accel_convert.codemods import Options
from accel_convert.converter.notebook_dispatch import convert_notebook
from accel_convert.converter.notebooks import (
    Masks,
    Piece,
    ipython_spans,
    join_pieces,
    split_module,
)
from accel_convert.converter.pipeline import ConversionError
from tests.launching import REPO_ROOT, base_env, free_port

FIXTURE = REPO_ROOT / "fixtures" / "notebooks" / "train_regression.ipynb"
KERNEL_TIMEOUT_S = 240


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", *args],
        capture_output=True,
        text=True,
        env=base_env(),
        cwd=cwd,
        timeout=timeout,
    )


def notebook_bytes(*sources: str, cell_type: str = "code") -> bytes:
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    for number, cell in enumerate(notebook.cells, start=1):
        cell["id"] = f"c{number}"
    return (nbformat.writes(notebook) + "\n").encode()


def code_sources(data: bytes) -> list[str]:
    return [cell.source for cell in nbformat.reads(data.decode(), as_version=4).cells if cell.cell_type == "code"]


# -- IPython syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "spans"),
    [
        ("%matplotlib inline\nimport torch\n", [(0, 0)]),
        ("!pip install x \\\n   y\nx = 1\n", [(0, 1)]),  # a continued shell line goes with it
        ("files = !ls\nout, err = %sx cat f\n", [(0, 0), (1, 1)]),
        ("model?\n??torch.nn\nx = 1  # really?\n", [(0, 0), (1, 1)]),
        ("for i in range(2):\n    %time f(i)\n", [(1, 1)]),
        # Python that only looks like IPython: modulo in brackets or after a backslash, text in strings.
        ("x = (a\n  % b)\ny = a \\\n  % b\n", []),
        ('doc = """\n%d items\n!important\n"""\n!ls\n', [(4, 4)]),
        ("s = 'it''s'  # %\n%who\n", [(1, 1)]),
    ],
)
def test_ipython_statements_are_found_only_where_a_statement_starts(code: str, spans: list[tuple[int, int]]) -> None:
    assert ipython_spans(code) == spans


def test_masked_cells_compile_and_restore_exactly() -> None:
    code = "%load_ext autoreload\nfor i in range(2):\n    !echo $i \\\n       more\nfiles = !ls\nmodel??\n"
    masks = Masks("__mask")
    masked, lines = masks.mask(code)
    compile(masked, "<cell>", "exec")  # libcst only ever sees Python
    assert lines == (1, 2, 3, 5, 6)  # the continued shell line is one masked line
    assert masks.restore(masked, "nb.ipynb") == (code, 4)


@pytest.mark.parametrize(
    "codes",
    [
        ["import torch\n", "x = 1\n"],
        ["", "\n", "  \n\n", "# only a comment\n"],
        ["a = 1\r\nb = 2\r\n", "c = 3\n\n\n"],
        ['s = """\nlast line\n"""\n', "t = 1  # __accel_convert_cell_2__\n"],
    ],
)
def test_joined_cells_split_back_exactly(codes: list[str]) -> None:
    pieces = [Piece(number, code, False, ()) for number, code in enumerate(codes, start=1)]
    joined = join_pieces(pieces, "__m")
    assert split_module(joined, "__m") == codes
    assert joined.count("\n") == sum(code.count("\n") for code in codes) + len(codes) - 1


# -- converting notebooks ------------------------------------------------------------------------


def test_unchanged_notebook_comes_back_byte_for_byte() -> None:
    source = notebook_bytes("import torch\nx = torch.ones(2)", "%%bash\necho hi", "print(x)")
    conversion = convert_notebook(source, Options(), path="nb.ipynb")
    assert conversion.output == source and not conversion.changes


def test_cells_are_one_program_and_everything_else_is_kept() -> None:
    source = FIXTURE.read_bytes()
    conversion = convert_notebook(source, Options(), path="nb.ipynb")
    before = nbformat.reads(source.decode(), as_version=4)
    after = nbformat.reads(conversion.output.decode(), as_version=4)
    assert [cell.id for cell in after.cells] == [cell.id for cell in before.cells]
    assert after.metadata == before.metadata
    for old, new in zip(before.cells, after.cells):
        assert new.cell_type == old.cell_type and new.metadata == old.metadata
        if old.cell_type != "code":
            assert new.source == old.source
        else:
            assert new.outputs == old.outputs and new.execution_count == old.execution_count
    # The import lands in the imports cell, the Accelerator in the training function's cell; the
    # magics, the %%capture cell and the help request are exactly as they were.
    assert "from accel_convert.runtime import Accelerator" in after.cells[1].source
    assert after.cells[1].source.count("%load_ext autoreload\n!echo shell escapes stay as written\n") == 1
    assert after.cells[2].source == before.cells[2].source
    assert after.cells[3].source == before.cells[3].source  # data cell: nothing to convert
    assert "accelerator = Accelerator()" in after.cells[5].source and "loss.backward()" not in after.cells[5].source
    assert after.cells[6].source == "train?"
    # Findings name the cell and count lines within it.
    cells = {(change.cell, change.code) for change in conversion.changes}  # type: ignore[attr-defined]
    assert (6, "ACC101") in cells and (6, "ACC105") in cells
    backward = next(change for change in conversion.changes if change.code == "ACC105")
    assert before.cells[5].source.splitlines()[backward.line - 1].strip() == "loss.backward()"
    # Converting the result again changes nothing.
    again = convert_notebook(conversion.output, Options(), path="nb.ipynb")
    assert again.output == conversion.output


def test_an_older_notebook_without_cell_ids_gets_none_added() -> None:
    data = json.loads(notebook_bytes(*TRAINING_CELLS))
    data["nbformat_minor"] = 4
    for cell in data["cells"]:
        del cell["id"]
    source = json.dumps(data, indent=1).encode()
    converted = json.loads(convert_notebook(source, Options(), path="nb.ipynb").output)
    assert "accelerator.backward(loss)" in "".join(converted["cells"][2]["source"])
    assert "id" not in converted["cells"][0] and converted["nbformat_minor"] == 4


def test_syntax_error_names_the_cell() -> None:
    source = notebook_bytes("import torch", "x = (1,\n  2", "y = 3")
    with pytest.raises(ConversionError) as error:
        convert_notebook(source, Options(), path="nb.ipynb")
    assert error.value.path == "nb.ipynb:cell 2"
    assert "syntax error" in error.value.message


#: Training written at the top level of three cells.
TRAINING_CELLS = (
    "import torch\nmodel = torch.nn.Linear(2, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "loader = torch.utils.data.DataLoader(torch.randn(8, 2), batch_size=2)",
    "for x in loader:\n    loss = model(x.cuda()).sum()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()",
)


def test_a_rewrite_that_would_move_code_across_cells_is_refused() -> None:
    source = notebook_bytes(*TRAINING_CELLS)
    cells = code_sources(convert_notebook(source, Options(), path="nb.ipynb").output)
    # One program across cells: prepared after the loader (cell 2), before the loop (cell 3).
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)" in cells[1]
    assert "accelerator = Accelerator()" in cells[0] and "accelerator.backward(loss)" in cells[2]
    with pytest.raises(ConversionError, match="move code across cells"):
        convert_notebook(source, Options(oom_retry=True), path="nb.ipynb")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not a notebook: invalid JSON"),
        (b'{"cells": [], "nbformat": 3}', "notebook format 3"),
        (b"[1, 2]", "not a notebook"),
        (b'{"cells": ["x = 1"], "nbformat": 4}', "not a notebook: cell 1 is not a JSON object"),
    ],
)
def test_what_is_not_a_notebook_is_one_error_line(data: bytes, message: str) -> None:
    with pytest.raises(ConversionError) as error:
        convert_notebook(data, Options(), path="bad.ipynb")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_cli_diff_check_and_output(tmp_path: Path) -> None:
    notebook = tmp_path / "train.ipynb"
    notebook.write_bytes(FIXTURE.read_bytes())
    (tmp_path / "helper.py").write_text("import torch\n")

    diff = cli("--diff", "-v", "train.ipynb", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert "--- a/train.ipynb:cell 6\n+++ b/train.ipynb:cell 6\n" in diff.stdout
    assert "-            loss.backward()\n+            accelerator.backward(loss)\n" in diff.stdout
    assert '"cell_type"' not in diff.stdout  # the code, not the JSON
    assert "train.ipynb:cell 6:13:13: ACC105" in diff.stderr

    check = cli("--check", ".", cwd=tmp_path)  # folder discovery finds the notebook too
    assert check.returncode == 1
    assert "train.ipynb:cell 6:" in check.stderr and "1 would convert, 1 unchanged" in check.stderr

    written = cli("train.ipynb", "-o", "train_ddp.ipynb", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    output = (tmp_path / "train_ddp.ipynb").read_bytes()
    nbformat.validate(nbformat.reads(output.decode(), as_version=4))
    assert code_sources(output)[-2].count("accelerator.backward(loss)") == 1
    assert notebook.read_bytes() == FIXTURE.read_bytes()  # the input is untouched
    assert cli("--check", "train.ipynb", "-o", "train_ddp.ipynb", cwd=tmp_path).returncode == 0
    assert cli("--check", "train_ddp.ipynb", cwd=tmp_path).returncode == 0  # converted: nothing left

    piped = subprocess.run(
        [sys.executable, "-m", "accel_convert.converter", "-", "--stdin-filename", "train.ipynb"],
        input=FIXTURE.read_bytes(),
        capture_output=True,
        env=base_env(),
        timeout=120,
    )
    assert piped.returncode == 0 and piped.stdout == output  # stdin to stdout, by the name given


# -- notebook_launcher (in this process: the refusals happen before anything starts) -------------


def test_launcher_refuses_when_cuda_is_already_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from accel_convert.runtime import notebook_launcher

    started: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA was already initialised") as error:
        notebook_launcher(lambda: started.append(1), num_processes=2)
    assert "Restart the kernel" in str(error.value) and not started


def test_launcher_refuses_an_accelerator_made_in_the_notebook() -> None:
    from accel_convert.runtime import PartialState, notebook_launcher

    PartialState()
    try:
        with pytest.raises(RuntimeError, match="Accelerator .* was already created"):
            notebook_launcher(print, num_processes=2)
    finally:
        PartialState._reset_state()


def test_launcher_checks_its_arguments() -> None:
    from accel_convert.runtime import notebook_launcher

    with pytest.raises(ValueError, match="mixed_precision"):
        notebook_launcher(print, num_processes=2, mixed_precision="fp12")
    with pytest.raises(ValueError, match="node_rank"):
        notebook_launcher(print, num_processes=2, num_nodes=2, node_rank=2)


# -- a real kernel -------------------------------------------------------------------------------


def run_in_kernel(notebook: Any, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """Execute every cell in a fresh Python kernel that imports this checkout."""
    import nbclient  # the test extra installs it, with ipykernel for the kernel

    client = nbclient.NotebookClient(
        notebook, timeout=KERNEL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    return client.execute(env=base_env(env))


def launched_in_kernel(
    tmp_path: Path, target: str, launch_cell: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Convert the fixture through the CLI for ``target``, add a cell launching ``train`` on 2
    CPU processes, run the notebook in a kernel; rank 0's report and the launch cell's output."""
    converted = tmp_path / "converted.ipynb"
    result = cli(str(FIXTURE), "--target", target, "-o", str(converted))
    assert result.returncode == 0, result.stderr
    notebook = nbformat.reads(converted.read_text(encoding="utf-8"), as_version=4)
    notebook.cells = [cell for cell in notebook.cells if cell.source != "train?"]  # a pager, not output
    launch_code = launch_cell.format(out=str(tmp_path), port=free_port(), other_port=free_port())
    notebook.cells.append(nbformat.v4.new_code_cell(launch_code))
    executed = run_in_kernel(notebook, tmp_path, env)
    launch_output = "".join(output.get("text", "") for output in executed.cells[-1].outputs)
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert not (tmp_path / "rank1.json").exists()  # the converter put the file write on rank 0 only
    return report, launch_output


#: Launches a function whose rank 1 raises while rank 0 waits for it (in the same kernel run).
FAILING_LAUNCH = """

def failing():
    accelerator = Accelerator()
    if accelerator.process_index == 1:
        raise ValueError("rank 1 fails on purpose")
    accelerator.wait_for_everyone()

try:
    notebook_launcher(failing, num_processes=2, use_port={other_port})
except RuntimeError as error:
    print("failed launch raised with the worker's error:", "ValueError: rank 1 fails on purpose" in str(error))
"""


def test_converted_notebook_trains_on_two_processes_from_a_kernel(tmp_path: Path) -> None:
    report, output = launched_in_kernel(
        tmp_path,
        "runtime",
        "from accel_convert.runtime import notebook_launcher\nnotebook_launcher(train, args=({out!r},), num_processes=2, use_port={port})"
        + FAILING_LAUNCH,
    )
    assert "Launching training on 2 CPUs." in output
    # A worker that raises: the other is stopped, the cell gets its traceback.
    assert "failed launch raised with the worker's error: True" in output
    assert "rank 0: seen 96 samples" in output  # 64 samples x 3 epochs, half on each of 2 ranks
    assert report["world"] == 2 and report["seen"] == 96
    # The same training in this process, on one process with the whole data set and twice the
    # batch per step (the average of the two ranks' gradients): the same weights.
    assert report["weight"] == pytest.approx(single_process_weights(batch_size=16), abs=1e-5)


def single_process_weights(batch_size: int) -> list[float]:
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(0)
    features = torch.randn(64, 4, generator=generator)
    targets = features @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    # Rank r takes samples r, r+2, ... of each 16: one step sees a batch's 16 samples interleaved.
    for _ in range(3):
        for start in range(0, 64, batch_size):
            loss = nn.functional.mse_loss(
                model(features[start : start + batch_size]), targets[start : start + batch_size]
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.weight.detach().flatten().tolist()


def test_converted_for_accelerate_trains_on_two_processes_from_a_kernel(tmp_path: Path) -> None:
    report, output = launched_in_kernel(
        tmp_path,
        "accelerate",
        "from accelerate import notebook_launcher\nnotebook_launcher(train, args=({out!r},), num_processes=2, use_port={port})",
        # Accelerate trains on several CPU processes only when told to (runtime finds it out).
        env={"ACCELERATE_USE_CPU": "1"},
    )
    assert "rank 0: seen 96 samples" in output
    assert report["world"] == 2 and report["seen"] == 96
    assert report["weight"] == pytest.approx(single_process_weights(batch_size=16), abs=1e-5)
