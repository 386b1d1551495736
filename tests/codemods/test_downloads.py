"""ACC115: dataset downloads run on the main process first, where every rank reaches the barrier."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from accel_convert.codemods import Options, convert_module

HEADER = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets


def main():
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{body}
    loader = DataLoader(train_set, batch_size=8)
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
"""


def convert(body: str) -> tuple[str, list[str]]:
    source = HEADER.format(body=textwrap.indent(textwrap.dedent(body), "    "))
    outcome = convert_module(cst.parse_module(source), Options())
    again = convert_module(outcome.module, Options())
    assert again.module.code == outcome.module.code, "not idempotent"
    return outcome.module.code, [change.code for change in outcome.changes]


def test_consecutive_downloads_go_under_one_main_process_first() -> None:
    code, codes = convert("""
        train_set = datasets.MNIST("data", train=True, download=True)
        test_set = datasets.MNIST("data", train=False, download=True)
    """)
    assert (
        "    with accelerator.main_process_first():\n"
        '        train_set = datasets.MNIST("data", train=True, download=True)\n'
        '        test_set = datasets.MNIST("data", train=False, download=True)\n'
    ) in code
    assert codes.count("ACC115") == 2


def test_no_barrier_where_a_rank_could_skip_it() -> None:
    code, codes = convert("""
        if torch.cuda.is_available():
            train_set = datasets.MNIST("data", train=True, download=True)
    """)
    assert "main_process_first" not in code and "ACC115" not in codes


def test_a_try_whose_body_downloads_runs_whole_on_the_main_process_first() -> None:
    # Before, a download in a ``try`` body ran on every process at once (into the same folder).
    code, codes = convert("""
        try:
            train_set = datasets.MNIST("data", train=True, download=True)
            print(len(train_set))
        except OSError:
            train_set = datasets.MNIST("data", train=True, download=False)
        else:
            print("downloaded")
        finally:
            print("done")
    """)
    assert (
        "    with accelerator.main_process_first():\n"
        "        try:\n"
        '            train_set = datasets.MNIST("data", train=True, download=True)\n'
        "            accelerator.print(len(train_set))\n"
        "        except OSError:\n"
        '            train_set = datasets.MNIST("data", train=True, download=False)\n'
        "        else:\n"
        '            accelerator.print("downloaded")\n'
        "        finally:\n"
        '            accelerator.print("done")\n'
    ) in code
    assert codes.count("ACC115") == 1


def test_a_try_that_also_trains_is_not_run_on_the_main_process_first() -> None:
    # The others would wait at the barrier while the main process trains alone (a hang).
    code, codes = convert("""
        try:
            train_set = datasets.MNIST("data", train=True, download=True)
            for x, y in DataLoader(train_set, batch_size=8):
                model(x).sum().backward()
        except KeyboardInterrupt:
            train_set = None
    """)
    assert "main_process_first" not in code and "ACC115" not in codes


def test_download_false_is_left_alone() -> None:
    code, codes = convert("""
        train_set = datasets.MNIST("data", train=True, download=False)
    """)
    assert "main_process_first" not in code and "ACC115" not in codes


def test_a_call_of_the_scripts_own_download_function_runs_on_the_main_process_first() -> None:
    source = (Path(__file__).parent / "data" / "hand_written_download.py").read_text()
    code = convert_module(cst.parse_module(source), Options(), source).module.code
    # Every rank fetching and unpacking into the same folder races; the others must wait.
    assert '    with accelerator.main_process_first():\n        root = fetch("data")\n' in code


FETCH = """\
import os
import urllib.request


def fetch(root):
    path = os.path.join(root, "train.pt")
    if not os.path.exists(path):
        os.makedirs(root, exist_ok=True)
        urllib.request.urlretrieve("https://example.com/train.pt", path)
    return path


"""


def test_a_folder_the_download_function_creates_under_main_process_first_is_not_reported() -> None:
    """``os.makedirs`` under ``if not os.path.exists(...)`` in the script's own download
    function: no barrier can go there, but the call runs under ``main_process_first``, so the
    main process creates the folder alone first; reporting it would be noise."""
    source = FETCH + HEADER.format(body='    train_set = torch.load(fetch("data"))')
    outcome = convert_module(cst.parse_module(source), Options(), source)
    codes = [change.code for change in outcome.changes]
    assert (
        '        train_set = torch.load(fetch("data"), map_location={"cuda:0": str(accelerator.device)})'
        in outcome.module.code
    )
    assert "ACC115" in codes and "ACC916" not in codes


def test_the_folder_is_still_reported_where_a_call_is_not_run_first_by_the_main_process() -> None:
    body = (
        '    train_set = torch.load(fetch("data"))\n    try:\n        fetch("extra")\n    except OSError:\n        pass'
    )
    source = FETCH + HEADER.format(body=body)
    outcome = convert_module(cst.parse_module(source), Options(), source)
    reported = [change for change in outcome.changes if change.code == "ACC916"]
    assert [change.line for change in reported] == [8]


HELPER_DOWNLOADS = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets


def get_loader(root):
    train_set = datasets.MNIST(root, train=True, download={flag})
    return DataLoader(train_set, batch_size=64, shuffle=True)


def get_dataset(root):
    makers = {{"mnist": lambda: datasets.MNIST(root, download={flag})}}
    return makers["mnist"]()


def main():
    loader = get_loader("data")
    other = get_dataset("data")
    model = torch.nn.Linear(784, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, labels in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images.flatten(1)), labels).backward()
        optimizer.step()
"""


def test_a_download_goes_under_the_barrier_once_where_it_happens() -> None:
    """A helper's own ``download=True`` statement goes under ``main_process_first`` where it stands
    (its call is left as it is: no barrier inside a barrier); a lambda downloads where it is
    called, so the call of the function calling it goes under it, not the table of lambdas."""
    source = HELPER_DOWNLOADS.format(flag="True")
    code = convert_module(cst.parse_module(source), Options(), source).module.code
    assert "    with accelerator.main_process_first():\n        train_set = datasets.MNIST(" in code
    assert '    loader = get_loader("data", accelerator)\n' in code
    assert '    with accelerator.main_process_first():\n        other = get_dataset("data")\n' in code
    assert "    makers = {" in code  # the table itself stays where it was
    assert code.count("main_process_first") == 2


def test_a_lambda_that_does_not_download_makes_no_download_function() -> None:
    source = HELPER_DOWNLOADS.format(flag="False")
    code = convert_module(cst.parse_module(source), Options(), source).module.code
    assert "main_process_first" not in code
