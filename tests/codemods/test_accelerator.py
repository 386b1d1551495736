"""accelerator (ACC101): one accelerator, created early but never at import time; and what
convert_module does around the rules (scripts without torch, --select/--ignore)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.accelerator import cpu_flag, device_switches
from tests.codemods.support import HEADER, check_expectations, convert, in_loop

PLACEMENT = {
    "after argument parsing in main": (
        "def main():\n    parser = argparse.ArgumentParser()\n    args = parser.parse_args()\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ["args = parser.parse_args()", "accelerator = Accelerator()", "model = nn.Linear(4, 1)"],
    ),
    "top of main without parsing": (
        'def main():\n    """Train."""\n    model = nn.Linear(4, 1)\n'
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ['"""Train."""', "accelerator = Accelerator()", "model = nn.Linear(4, 1)"],
    ),
    "module-level script, not at import time": (
        "class Net(nn.Module):\n    pass\n\nseed = 1\nmodel = nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ["seed = 1", "accelerator = Accelerator()", "model = nn.Linear(4, 1)"],
    ),
    "inside the __main__ block": (
        "if __name__ == '__main__':\n    args = argparse.ArgumentParser().parse_args()\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ["args = argparse.ArgumentParser().parse_args()", "accelerator = Accelerator()", "model = nn.Linear(4, 1)"],
    ),
    # No optimizer, no loader: the backward sits in train(), but the module builds the objects
    # and prints, so the accelerator goes after the module's argument parsing, not into train().
    "module-level script with hand-written SGD": (
        "args = argparse.ArgumentParser().parse_args()\ndevice = torch.device('cpu')\n"
        "model = nn.Linear(4, 1).to(device)\n\ndef train():\n    loss = model(torch.ones(4)).sum()\n"
        "    loss.backward()\n    for p in model.parameters():\n        p.data.add_(p.grad, alpha=-0.1)\n\n"
        "for epoch in range(2):\n    train()\n    print(epoch)\n",
        [
            "args = argparse.ArgumentParser().parse_args()",
            "accelerator = Accelerator()",
            "device = accelerator.device",
            "accelerator.backward(loss)",
            "accelerator.print(epoch)",
        ],
    ),
}


@pytest.mark.parametrize(("body", "in_order"), PLACEMENT.values(), ids=PLACEMENT.keys())
def test_accelerator_is_created_early_but_not_too_early(body: str, in_order: list[str]) -> None:
    code, _ = convert(body)
    lines = [line.strip() for line in code.splitlines()]
    positions = [lines.index(line) for line in in_order]
    assert positions == sorted(positions) and positions[1] == positions[0] + 1, code
    assert "from accel_convert.runtime import Accelerator" in lines
    accelerate, _ = convert(body, Options(target="accelerate"))
    assert "from accelerate import Accelerator" in accelerate.splitlines()


def test_a_module_that_trains_nothing_gets_no_accelerator() -> None:
    """A models/utilities module imported by the training script (and by DataLoader workers):
    creating an accelerator there would run at import time."""
    source = HEADER + textwrap.dedent("""\
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        class Net(nn.Module):
            def forward(self, x):
                print(x.shape)
                return x.cuda()

        def describe(model):
            print(model)
        """)
    outcome = convert_module(cst.parse_module(source), Options())
    assert outcome.module.code == source
    assert [change for change in outcome.changes if change.fixed] == []


def test_a_script_with_an_accelerator_gets_only_what_is_missing() -> None:
    body = (
        "from accelerate import Accelerator\n\n"
        "def main():\n    print('starting')\n    acc = Accelerator()\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model, optimizer, loader = acc.prepare(model, optimizer, loader)\n"
        "    for (x,) in loader:\n        acc.backward(model(x).sum())\n        print('step')\n"
    )
    code, lines = convert(body)
    assert "print('starting')" in lines  # before the accelerator exists
    assert "acc.print('step')" in lines
    assert "from accel_convert.runtime import Accelerator" not in lines and lines.count("acc = Accelerator()") == 1
    assert not any(line.startswith("#ACC10") and line != "#ACC107" for line in lines)


def test_module_without_torch_is_returned_untouched() -> None:
    module = cst.parse_module("import numpy as np\nprint(np.ones(3))\n")
    outcome = convert_module(module, Options())
    assert outcome.module is module
    assert outcome.changes == []


@pytest.mark.parametrize(
    ("options", "rewritten", "kept"),
    [
        (Options(select=("ACC105",)), "accelerator.backward(loss)", "print(loss)"),
        (Options(ignore=("ACC105",)), "accelerator.print(loss)", "loss.backward()"),
    ],
)
def test_select_and_ignore_switch_passes(options: Options, rewritten: str, kept: str) -> None:
    code, _ = convert(in_loop("loss = model(batch[0]).sum()\nloss.backward()\nprint(loss)"), options)
    lines = [line.strip() for line in code.splitlines()]
    assert rewritten in lines and kept in lines


def test_a_module_level_script_gets_the_accelerator_before_its_first_backward() -> None:
    from accel_convert.codemods import Options, convert_module

    source = "import torch\nx = 1\nloss.backward()\noptimizer.step()\nprint(x)\n"
    code = convert_module(cst.parse_module(source), Options()).module.code
    assert code.index("accelerator = Accelerator()") < code.index("accelerator.backward(loss)")


def test_the_analysis_reads_the_device_switches_in_source_order() -> None:
    """What ``cpu=`` is built from: flags tested by device decisions (an ``if`` whose body, not
    its ``else``, moves something with ``.cuda()``), and the options the parser defines."""
    source = (
        "import argparse\n"
        "import torch\n"
        "parser = argparse.ArgumentParser()\n"
        'parser.add_argument("--no-cuda", action="store_true")\n'
        'parser.add_argument("--gpu", dest="use_gpu", action="store_true")\n'
        "args = parser.parse_args()\n"
        "model = torch.nn.Linear(2, 2)\n"
        "if args.use_gpu:\n"
        "    pass\n"
        "elif args.other:\n"
        "    model.cuda()\n"
        "use_cuda = not args.no_cuda and torch.cuda.is_available()\n"
    )
    facts = analyse(cst.parse_module(source), source)
    assert facts.parser_options == {"no_cuda", "use_gpu"}
    assert facts.parsed_arguments == {"args"}
    assert facts.of(device_switches) == (("args.other", False), ("args.no_cuda", True))
    assert cpu_flag(facts) == "args.no_cuda"


def test_a_cpu_flag_from_the_parser_puts_the_creation_after_parsing_even_after_an_early_default_device() -> None:
    # A default device chosen before the parser runs must not pull Accelerator(cpu=args.no_cuda)
    # above ``args = parser.parse_args()`` (NameError on every run).
    body = """\
if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()
    device = torch.device("cuda" if not args.no_cuda and torch.cuda.is_available() else "cpu")
    x = torch.randn(16, 3).to(device)
    model = nn.Linear(3, 1).to(device)
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(3):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        optimizer.step()
"""
    code, lines = convert(body)
    assert code.index("args = parser.parse_args()") < code.index("accelerator = Accelerator(cpu=args.no_cuda)")
    check_expectations(body, ["accelerator = Accelerator(cpu=args.no_cuda)", "device = accelerator.device"])


def test_a_module_level_call_of_a_function_the_accelerator_reaches_comes_after_its_creation() -> None:
    body = """\
def download(dest):
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "data.txt"), "w") as f:
        f.write("1 2 3")
    return dest


root = download("data")
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
"""
    code, _ = convert("import os\n" + body)
    # download() writes on the main process only now: it needs the accelerator at its first call.
    assert "if accelerator.is_main_process:" in code
    assert code.index("accelerator = Accelerator()") < code.index('root = download("data")')
    assert "    return dest\n\n\naccelerator = Accelerator()\nroot = download" in code


def test_a_device_flag_read_whole_keeps_the_cpu_choice() -> None:
    """``--device cpu`` with ``device = torch.device(args.device)``: the accelerator must train
    on the CPU when asked, as ``--no-cuda`` does."""
    body = """\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
"""
    # The device is no longer read once prepare places everything: the selection line is gone
    # (unused-device, ACC125), not kept as a move to "cuda".
    check_expectations(
        body, ['accelerator = Accelerator(cpu=args.device == "cpu")', "-device = torch.device(args.device)"]
    )


@pytest.mark.parametrize("option", ["device", "train_device"])
def test_a_device_flag_copied_as_it_is_is_a_device_selection(option: str) -> None:
    """``device = args.device`` (the string, no ``torch.device``): a device selection like any
    other, not an alias to keep — kept, the model would go to "cuda", GPU 0, on every rank."""
    flag = "--" + option.replace("_", "-")
    body = f"""\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("{flag}", default="cuda")
    args = parser.parse_args()
    device = args.{option}
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
"""
    check_expectations(
        body,
        [
            f'accelerator = Accelerator(cpu=args.{option} == "cpu")',
            f"-device = args.{option}",
            "model = nn.Linear(4, 1)",
        ],
    )


def test_a_device_chosen_in_an_if_on_a_flag_keeps_the_cpu_choice() -> None:
    """SimCLR's ``if not args.disable_cuda and torch.cuda.is_available(): args.device =
    torch.device("cuda") else: ... "cpu"``: ``--disable-cuda`` must still mean the CPU."""
    body = """\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--disable-cuda", action="store_true")
    args = parser.parse_args()
    if not args.disable_cuda and torch.cuda.is_available():
        args.device = torch.device("cuda")
    else:
        args.device = torch.device("cpu")
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x.to(args.device)), y.to(args.device)).backward()
        optimizer.step()
"""
    check_expectations(body, ["accelerator = Accelerator(cpu=args.disable_cuda)", "args.device = accelerator.device"])


def test_the_accelerator_comes_after_a_function_that_parses_the_command_line() -> None:
    """``args = get_args()`` (a function of the file returning ``parser.parse_args()``) is
    argument parsing: the accelerator is created after it, so its arguments can read ``args``
    (U-Net, the early-stopping tutorial). A function that also prints is not only parsing."""
    body = (
        "def get_args():\n"
        "    parser = argparse.ArgumentParser()\n"
        '    parser.add_argument("--no-cuda", action="store_true")\n'
        "    return parser.parse_args()\n\n\n"
        'if __name__ == "__main__":\n'
        "    args = get_args()\n"
        '    device = torch.device("cuda" if not args.no_cuda and torch.cuda.is_available() else "cpu")\n'
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)\n"
        "    model = nn.Linear(4, 1).to(device)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n"
        "        nn.functional.mse_loss(model(x), y).backward()\n"
        "        optimizer.step()\n"
    )
    code, lines = convert(body)
    assert code.index("args = get_args()") < code.index("accelerator = Accelerator(cpu=args.no_cuda)")


def test_a_device_flag_parsed_by_get_args_parser_is_carried_into_the_accelerator() -> None:
    """torchvision's reference scripts: ``args = get_args_parser().parse_args()`` in the
    ``__main__`` block, ``main(args)`` reads ``torch.device(args.device)``: ``--device cpu`` keeps
    the run on the CPU (before, the parse through a call chain was not seen and the flag was lost)."""
    body = (
        "def get_args_parser():\n"
        "    parser = argparse.ArgumentParser()\n"
        '    parser.add_argument("--device", default="cuda")\n'
        "    return parser\n\n\n"
        "def main(args):\n"
        "    device = torch.device(args.device)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)\n"
        "    model = nn.Linear(4, 1).to(device)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n"
        "        nn.functional.mse_loss(model(x), y).backward()\n"
        "        optimizer.step()\n\n\n"
        'if __name__ == "__main__":\n'
        "    args = get_args_parser().parse_args()\n"
        "    main(args)\n"
    )
    _, lines = convert(body)
    assert 'accelerator = Accelerator(cpu=args.device == "cpu")' in lines


_CREATIONS = {
    "an alias of Accelerate's": ("from accelerate import Accelerator as A\n", "A()", True),
    "through the accelerate module": ("import accelerate\n", "accelerate.Accelerator()", True),
    "the runtime's": ("from accel_convert.runtime import Accelerator\n", "Accelerator()", True),
    "the name the accelerator pass imports": ("", "Accelerator()", True),
    "a class of the script's own": ("class Accelerator:\n    pass\n", "Accelerator()", False),
    "an alias of the script's own class": ("class Booster:\n    pass\n\nA = Booster\n", "A()", False),
}


@pytest.mark.parametrize("case", sorted(_CREATIONS))
def test_the_creation_is_found_by_the_class_qualified_name(case: str) -> None:
    """The statement creating the accelerator (where accumulation and AMP add their arguments,
    and where the guard moves it) is Accelerate's or the runtime's class however it is spelled,
    never a class of the script's own that happens to be called ``Accelerator``."""
    from accel_convert.codemods.engine.accelerator_creation import move_creation_before
    from accel_convert.codemods.model.plan import find_creation

    prelude, call, expected = _CREATIONS[case]
    for body in (f"accelerator = {call}\nprint(1)\n", f"def main():\n    print(1)\n    accelerator = {call}\n"):
        module = cst.parse_module(prelude + body)
        facts = analyse(module)
        assert (find_creation(module, facts) is not None) is expected, body
    # The guard's repair (an accelerator read above its creation) knows the class the same way.
    module = cst.parse_module(prelude + f"def main():\n    print(1)\n    accelerator = {call}\n")
    moved = move_creation_before(module, "accelerator", len(prelude.splitlines()) + 2)
    runtime_import = "from accel_convert.runtime import Accelerator\n"
    if case == "the name the accelerator pass imports":  # the pass has imported it by then
        moved = move_creation_before(
            cst.parse_module(runtime_import + module.code), "accelerator", len(prelude.splitlines()) + 3
        )
    assert (moved is not None) is expected
