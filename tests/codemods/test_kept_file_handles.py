"""A file opened for writing into a name and written through on every rank (deep-text-recognition's
``log = open(f"./saved_models/{name}/log_train.txt", "a")`` in ``train()``, a notebook's module-level
``log``, a trainer's ``self.log`` in ``__init__``): the file-flow owner (``file_flow.kept_handles``)
says whether the main process alone can write it, and the side-effects rule opens it there
(``os.devnull`` on the others), reports it where it cannot, and leaves alone what is no such handle."""

from __future__ import annotations

import os
import tempfile

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.model.file_flow import (
    HANDLE_READ_BACK,
    HANDLE_READ_THROUGH,
    SCRATCH,
    devnull_mode,
    other_ranks_file,
)
from accel_convert.codemods.model.plan import plan_of
from tests.codemods.support import code, convert_text

TRAINING = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def main():
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        log = open("train.log", "w")
        for epoch in range(3):
            for data, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
            log.write(f"epoch {epoch}\\n")
        log.close()


    if __name__ == "__main__":
        main()
    """
)
OPEN_LINE = 10


def _acc916(changes) -> list[tuple[int, str]]:
    return [(change.line, change.message) for change in changes if change.code == "ACC916"]


@pytest.mark.parametrize("mode", ["w", "a", "ab"])
def test_a_handle_written_on_every_rank_is_opened_on_the_main_process_only(mode: str) -> None:
    source = TRAINING.replace('open("train.log", "w")', f'open("train.log", "{mode}")')
    output, changes = convert_text(source)
    assert f'    log = open("train.log" if accelerator.is_main_process else os.devnull, "{mode}")\n' in output
    assert "import os\n" in output
    # Every rank keeps writing through its handle: nothing is guarded, nothing waits.
    assert '        log.write(f"epoch {epoch}\\n")\n' in output and "wait_for_everyone" not in output
    assert [c.line for c in changes if c.code == "ACC116" and "os.devnull" in c.message] == [OPEN_LINE]
    assert _acc916(changes) == []
    again, _ = convert_text(output)
    assert again == output


def test_a_module_level_handle_in_a_notebook_is_opened_on_the_main_process_only() -> None:
    source = code(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        log = open("train.log", "a")
        for epoch in range(3):
            for data, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch}", file=log)
        log.close()
        """
    )
    output, changes = convert_text(source)
    assert 'log = open("train.log" if accelerator.is_main_process else os.devnull, "a")\n' in output
    assert _acc916(changes) == []


def test_a_trainers_kept_handle_is_opened_on_the_main_process_only() -> None:
    source = code(
        """
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        class Trainer:
            def __init__(self, log_path):
                self.loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                self.model = nn.Linear(8, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.log = open(log_path, "a")

            def fit(self):
                for epoch in range(3):
                    for data, target in self.loader:
                        self.optimizer.zero_grad()
                        nn.functional.mse_loss(self.model(data), target).backward()
                        self.optimizer.step()
                    self.log.write(f"epoch {epoch}\\n")


        def main():
            Trainer("train.log").fit()


        if __name__ == "__main__":
            main()
        """
    )
    output, changes = convert_text(source)
    assert 'self.log = open(log_path if self.accelerator.is_main_process else os.devnull, "a")\n' in output
    assert _acc916(changes) == []


def test_a_handle_read_back_later_stays_on_every_rank_and_is_reported() -> None:
    """The file-flow owner pairs the handle's file with a read of the same path after it: the main
    process alone writing it, another rank could read it before it is complete."""
    source = TRAINING.replace(
        "    log.close()\n", '    log.close()\n    with open("train.log") as f:\n        print(f.read())\n'
    )
    facts = analyse(cst.parse_module(source), source)
    assert dict(facts.handles_left_on_every_rank) == {(OPEN_LINE, 10): HANDLE_READ_BACK}
    output, changes = convert_text(source)
    assert '    log = open("train.log", "w")\n' in output and "os.devnull" not in output
    assert [line for line, message in _acc916(changes) if "read back" in message] == [OPEN_LINE]


def test_another_file_read_later_does_not_keep_the_handle_on_every_rank() -> None:
    source = TRAINING.replace(
        "    log.close()\n", '    log.close()\n    with open("settings.json") as f:\n        print(f.read())\n'
    )
    output, changes = convert_text(source)
    assert 'log = open("train.log" if accelerator.is_main_process else os.devnull, "w")' in output


@pytest.mark.parametrize("mode", ["a+", "ab+", "r+", "rb+"])
def test_a_handle_the_main_process_alone_cannot_keep_is_reported(mode: str) -> None:
    """A ``"+"`` mode reading back what the file held before (``"a+"``, ``"r+"``): only the real file holds
    it, so it stays on every rank, reported."""
    output, changes = convert_text(TRAINING.replace('open("train.log", "w")', f'open("train.log", "{mode}")'))
    assert f'    log = open("train.log", "{mode}")\n' in output
    assert [line for line, message in _acc916(changes) if HANDLE_READ_THROUGH in message] == [OPEN_LINE]


@pytest.mark.parametrize(("mode", "scratch"), [("w+", "w+"), ("x+", "w+"), ("wb+", "wb+"), ("xb+", "wb+")])
def test_a_handle_read_back_through_itself_is_a_scratch_file_on_the_other_ranks(mode: str, scratch: str) -> None:
    """``"w+"`` (or ``"x+"``): what is read back through the handle is what this run wrote into
    it; ``os.devnull`` would read back nothing on the other ranks (an ``IndexError`` at
    ``lines[-1]``). They write and read a scratch file of their own, the main process the real
    one (before, left on every rank and reported)."""
    source = TRAINING.replace('open("train.log", "w")', f'open("train.log", "{mode}", encoding=None)')
    output, changes = convert_text(source)
    assert (
        f'    log = open("train.log", "{mode}", encoding=None) if accelerator.is_main_process '
        f'else tempfile.TemporaryFile("{scratch}", encoding=None)\n'
    ) in output
    assert "import tempfile\n" in output and "os.devnull" not in output
    assert _acc916(changes) == []
    again, _ = convert_text(output)
    assert again == output


@pytest.mark.parametrize("mode", ["w+", "x+", "wb+"])
def test_the_scratch_file_reads_back_what_it_wrote(mode: str) -> None:
    """The other ranks' file (the owner's :func:`other_ranks_file`, opened as the rule writes it)
    reads back what was written into it, as the main process's does."""
    assert other_ranks_file(mode) == SCRATCH
    line = b"epoch 0\n" if "b" in mode else "epoch 0\n"
    with tempfile.TemporaryFile(devnull_mode(mode)) as scratch:
        scratch.write(line)
        scratch.seek(0)
        assert scratch.read() == line


def test_a_with_block_read_back_through_its_handle_is_a_scratch_file_on_the_other_ranks() -> None:
    """``with open(path, "w+") as log:`` around the training every rank runs, read back through
    the handle at its end: the others open a scratch file (before, ``os.devnull``: nothing to read
    back, ``lines[-1]`` failed on every rank but the main one)."""
    source = TRAINING.replace('    log = open("train.log", "w")\n', '    with open("train.log", "w+") as log:\n')
    source = source.replace("\n        ", "\n            ").replace("\n    for epoch", "\n        for epoch")
    source = source.replace("    log.close()\n", "        log.seek(0)\n        lines = log.read().splitlines()\n")
    source = source.replace("\n\nif __name__", "    print(lines[-1])\n\n\nif __name__")
    compile(source, "case.py", "exec")
    output, changes = convert_text(source)
    assert (
        '    with open("train.log", "w+") if accelerator.is_main_process else tempfile.TemporaryFile("w+") as log:\n'
        in output
    )
    assert "os.devnull" not in output and _acc916(changes) == []


def test_a_with_block_reading_what_its_file_held_is_reported() -> None:
    """``with open(path, "a+") as log:`` around the training: what it reads back through the
    handle includes what the file held before, which only the real file has: left on every rank,
    reported (before, neither rewritten nor reported)."""
    source = TRAINING.replace('    log = open("train.log", "w")\n', '    with open("train.log", "a+") as log:\n')
    source = source.replace("\n        ", "\n            ").replace("\n    for epoch", "\n        for epoch")
    source = source.replace("    log.close()\n", "        log.seek(0)\n        print(log.read())\n")
    compile(source, "case.py", "exec")
    output, changes = convert_text(source)
    assert '    with open("train.log", "a+") as log:\n' in output and "is_main_process" not in output
    assert [line for line, message in _acc916(changes) if HANDLE_READ_THROUGH in message] == [OPEN_LINE]


def test_a_handle_where_the_accelerator_is_not_reachable_is_reported() -> None:
    """Opened by module-level code of a script training in ``main()`` (every rank runs it, and no
    accelerator is there yet): reported, not rewritten."""
    source = TRAINING.replace('    log = open("train.log", "w")\n', "").replace(
        "def main():", 'log = open("train.log", "w")\n\n\ndef main():'
    )
    output, changes = convert_text(source)
    assert 'log = open("train.log", "w")\n' in output and "os.devnull" not in output
    assert [message.split(":")[0] for _, message in _acc916(changes)] == [
        "file opened for writing and kept where the accelerator is not reachable"
    ]


@pytest.mark.parametrize(
    "source",
    [
        # Read mode: nothing is written.
        TRAINING.replace('open("train.log", "w")', 'open("train.log")').replace(
            '        log.write(f"epoch {epoch}\\n")\n', "        print(log.readline())\n"
        ),
        TRAINING.replace('open("train.log", "w")', 'open("train.log", "r")').replace(
            '        log.write(f"epoch {epoch}\\n")\n', "        print(log.readline())\n"
        ),
        # Every write is under the script's own test of its rank.
        TRAINING.replace(
            '        log.write(f"epoch {epoch}\\n")\n',
            '        if args.rank == 0:\n            log.write(f"epoch {epoch}\\n")\n',
        )
        .replace("def main():", "def main(args):")
        .replace("    main()", "    main(parse())"),
    ],
    ids=["read-mode", "read-mode-r", "writes-under-a-rank-test"],
)
def test_what_is_no_handle_written_on_every_rank_stays(source: str) -> None:
    assert "print(log.readline())" in source or "if args.rank == 0:\n            log.write" in source
    output, changes = convert_text(source)
    assert "os.devnull" not in output
    assert _acc916(changes) == []


def test_a_handle_already_opened_on_the_main_process_stays() -> None:
    """A script using the accelerator that opens and writes its log under ``if
    accelerator.is_main_process:`` already: left as written."""
    source = code(
        """
        import torch
        import torch.nn as nn
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            accelerator = Accelerator()
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            model = nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            if accelerator.is_main_process:
                log = open("train.log", "w")
            for epoch in range(3):
                for data, target in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(data), target)
                    accelerator.backward(loss)
                    optimizer.step()
                if accelerator.is_main_process:
                    log.write(f"epoch {epoch}\\n")


        if __name__ == "__main__":
            main()
        """
    )
    output, changes = convert_text(source)
    assert '        log = open("train.log", "w")\n' in output and "os.devnull" not in output
    assert [c for c in changes if "devnull" in c.message] == []


GLOBAL_HANDLE = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    log = open("train.log", "a")


    def report(epoch):
        log.write(f"epoch {epoch}\\n")


    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for data, target in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(data), target).backward()
            optimizer.step()
        report(epoch)
    """
)


def test_a_global_handle_written_in_a_function_is_seen() -> None:
    """The module's ``log``, written by ``report()``, which reads the global: opened above the
    training objects, the accelerator is created above it (the plan) and it is opened on the main
    process only."""
    output, changes = convert_text(GLOBAL_HANDLE)
    assert 'log = open("train.log" if accelerator.is_main_process else os.devnull, "a")\n' in output
    assert output.index("accelerator = Accelerator()") < output.index("log = open(")
    assert _acc916(changes) == []


def test_a_local_of_the_same_name_is_not_the_global_handle() -> None:
    """``report()`` binds a ``log`` of its own: nothing writes through the module's file."""
    source = GLOBAL_HANDLE.replace('    log.write(f"epoch {epoch}\\n")\n', "    log = []\n    log.append(epoch)\n")
    assert source != GLOBAL_HANDLE
    output, changes = convert_text(source)
    assert _acc916(changes) == [] and "os.devnull" not in output


@pytest.mark.parametrize(("mode", "other"), [("x", "w"), ("xb", "wb"), ("xt", "wt"), ("bx", "bw")])
def test_a_handle_created_exclusively_opens_devnull_for_writing_on_the_other_ranks(mode: str, other: str) -> None:
    """``os.devnull`` exists: opened with ``"x"`` it fails (FileExistsError) on every rank but the
    main one. The main process creates the file as the original does, the others open
    ``os.devnull`` in the same mode but ``"w"``."""
    output, changes = convert_text(TRAINING.replace('open("train.log", "w")', f'open("train.log", "{mode}")'))
    assert (
        f'    log = open("train.log", "{mode}") if accelerator.is_main_process else open(os.devnull, "{other}")\n'
        in output
    )
    assert _acc916(changes) == []
    again, _ = convert_text(output)
    assert again == output


def test_a_with_block_creating_its_file_exclusively_opens_devnull_for_writing() -> None:
    """``with open(path, mode="x") as out:`` around an evaluation every rank runs (the block stays
    on every rank): the others write to ``os.devnull`` opened with ``mode="w"``."""
    source = TRAINING.replace('    log = open("train.log", "w")\n', "").replace(
        '        log.write(f"epoch {epoch}\\n")\n',
        '        with open("preds.txt", mode="x") as out:\n'
        "            for data, target in loader:\n"
        '                out.write(f"{model(data).sum().item()}\\n")\n',
    )
    assert 'open("preds.txt", mode="x")' in source and "log.close()" in source
    source = source.replace("    log.close()\n", "")
    output, _ = convert_text(source)
    assert (
        'with open("preds.txt", mode="x") if accelerator.is_main_process else open(os.devnull, mode="w") as out:'
        in output
    )


@pytest.mark.parametrize("mode", ["w", "a", "x", "wb", "ab", "xb", "wt", "w+", "a+", "x+", "xb+", "r+"])
def test_every_mode_the_other_ranks_get_opens_devnull(mode: str) -> None:
    with open(os.devnull, devnull_mode(mode)) as devnull:
        devnull.write(b"line\n" if "b" in mode else "line\n")


MODULE_LOG_FIRST = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    log = open("train.log", "a")
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for data, target in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(data), target).backward()
            optimizer.step()
        print(f"epoch {epoch}", file=log)
    log.close()
    """
)


def test_the_accelerator_is_created_above_a_module_level_handle_opened_before_the_training_objects() -> None:
    """The plan (not the rewrite) puts the creation above the first kept handle the main process
    alone writes: the handle is opened there, not reported as out of the accelerator's reach."""
    facts = analyse(cst.parse_module(MODULE_LOG_FIRST), MODULE_LOG_FIRST)
    assert facts.handles_main_process_writes == {(5, 6)}
    assert 5 in plan_of(facts).created_before_lines
    output, changes = convert_text(MODULE_LOG_FIRST)
    assert 'log = open("train.log" if accelerator.is_main_process else os.devnull, "a")\n' in output
    assert output.index("accelerator = Accelerator()") < output.index("log = open(")
    assert _acc916(changes) == []


def test_the_accelerator_is_created_above_a_class_opening_a_handle_in_its_init() -> None:
    """Module-level code building, before its training objects, an instance of a class whose
    ``__init__`` keeps a file the main process alone writes: the accelerator (a global its methods
    read) is created above the construction."""
    source = MODULE_LOG_FIRST.replace(
        'log = open("train.log", "a")\n',
        "class History:\n"
        "    def __init__(self, path):\n"
        '        self.log = open(path, "a")\n'
        "        self.best = 0.0\n\n"
        "    def update(self, epoch, loss):\n"
        "        self.best = max(self.best, loss)\n"
        '        self.log.write(f"epoch {epoch} {loss}\\n")\n'
        "        return self.best\n\n\n"
        'history = History("train.log")\n',
    ).replace('        print(f"epoch {epoch}", file=log)\n    log.close()\n', "        history.update(epoch, 0.5)\n")
    facts = analyse(cst.parse_module(source), source)
    assert facts.classes_opening_handles == {"History"}
    construction = source.splitlines().index('history = History("train.log")') + 1
    assert construction in plan_of(facts).created_before_lines
    output, changes = convert_text(source)
    assert 'self.log = open(path if accelerator.is_main_process else os.devnull, "a")\n' in output
    assert output.index("accelerator = Accelerator()") < output.index('history = History("train.log")')
    assert _acc916(changes) == []


OPENER_MODULE = code(
    """
    import os


    def open_log(folder, name):
        os.makedirs(folder, exist_ok=True)
        return open(os.path.join(folder, name), "w")
    """
)


def _convert_with(train: str, name: str, other: str) -> tuple[str, str, list[tuple[int, str]]]:
    """``train`` converted with module ``name`` (``other``) as one program: both outputs, and the
    entry's ACC916 reports."""
    modules = [
        ProgramModule("train", cst.parse_module(train), train, False),
        ProgramModule(name, cst.parse_module(other), other, False),
    ]
    outcomes = convert_program(modules, "train", Options())
    reported = [(c.line, c.message) for c in outcomes["train"].changes if c.code == "ACC916"]
    return outcomes["train"].module.code, outcomes[name].module.code, reported


def _opened_by(call: str, imports: str = "import logs\n") -> str:
    return TRAINING.replace("import torch\n", f"{imports}import torch\n", 1).replace(
        'log = open("train.log", "w")', call
    )


def test_a_handle_another_module_opens_is_opened_there_on_the_main_process_only() -> None:
    """``log = logs.open_log(...)`` of ``logs.py``'s ``return open(path, "w")``, written through
    each epoch on every rank and read back by no one: the file-flow owner follows the program's
    function (its ``handle_openers``) and tells the program (``main_process_openers_out``); the
    opener opens the file on the main process only (``os.devnull`` on the others), with the
    accelerator handed in, and every rank calls it, so the barrier after its ``os.makedirs`` is
    reached by all (before, reported: ACC916, every rank writing the file)."""
    opener = analyse(cst.parse_module(OPENER_MODULE), OPENER_MODULE)
    assert dict(opener.handle_openers) == {"open_log": "w"}
    train, logs, reported = _convert_with(_opened_by('log = logs.open_log("runs", "train.log")'), "logs", OPENER_MODULE)
    assert reported == []
    assert '    log = logs.open_log("runs", "train.log", accelerator)\n' in train
    assert "os.devnull" not in train
    assert "def open_log(folder, name, accelerator):\n" in logs
    assert '    return open(os.path.join(folder, name) if accelerator.is_main_process else os.devnull, "w")\n' in logs
    # The folder is made on the main process, and every rank waits for it (all of them call here).
    assert logs.index("accelerator.wait_for_everyone()") < logs.index("return open(")


OPENER_CLASS_MODULE = code(
    """
    import os


    class RunFolder:
        def __init__(self, root):
            self.root = root

        def open_log(self, name, mode="w"):
            handle = open(os.path.join(self.root, name), "w")
            return handle
    """
)


def test_a_handle_a_method_of_another_modules_class_opens_is_opened_there_on_the_main_process_only() -> None:
    """``log = run.open_log(...)`` after ``run = runlog.RunFolder(...)``, whose method binds and
    hands back ``open(path, "w")``: the class receives the accelerator and the method opens the
    file on the main process only."""
    opener = analyse(cst.parse_module(OPENER_CLASS_MODULE), OPENER_CLASS_MODULE)
    assert dict(opener.handle_openers) == {"RunFolder.open_log": "w"}
    source = _opened_by('run = runlog.RunFolder("runs")\n    log = run.open_log("train.log")', "import runlog\n")
    train, runlog, reported = _convert_with(source, "runlog", OPENER_CLASS_MODULE)
    assert reported == []
    assert '    run = runlog.RunFolder("runs", accelerator)\n' in train
    assert "os.devnull" not in train
    assert "self.accelerator = accelerator" in runlog
    assert (
        'handle = open(os.path.join(self.root, name) if self.accelerator.is_main_process else os.devnull, "w")'
        in runlog
    )


def test_a_handle_another_module_opens_with_w_plus_is_a_scratch_file_there_on_the_other_ranks() -> None:
    other = OPENER_MODULE.replace('"w")', '"w+")')
    train, logs, reported = _convert_with(_opened_by('log = logs.open_log("runs", "train.log")'), "logs", other)
    assert reported == []
    assert (
        '    return open(os.path.join(folder, name), "w+") if accelerator.is_main_process '
        'else tempfile.TemporaryFile("w+")\n'
    ) in logs
    assert "import tempfile\n" in logs


@pytest.mark.parametrize("mode", ["a+", "ab+", "r+", "rb+"])
def test_a_handle_another_module_opens_to_read_back_through_it_stays_on_every_rank(mode: str) -> None:
    """An opener's ``"a+"``: the handle reads back what the file held, which neither
    ``os.devnull`` nor a scratch file on the other ranks has: the opener stays as written, and the
    handle is reported where it is kept (ACC916)."""
    other = OPENER_MODULE.replace('"w")', f'"{mode}")')
    train, logs, reported = _convert_with(_opened_by('log = logs.open_log("runs", "train.log")'), "logs", other)
    assert [line for line, message in reported if HANDLE_READ_THROUGH in message] == [OPEN_LINE + 1]
    assert "os.devnull" not in train + logs
    assert f'    return open(os.path.join(folder, name), "{mode}")\n' in logs


def test_a_handle_another_module_opens_and_a_file_read_later_stays_on_every_rank() -> None:
    """A read later in the run that may open the kept file (its path is the opener's business, so
    any read may): the opener stays as written on every rank, reported where it is kept."""
    source = _opened_by('log = logs.open_log("runs", "train.log")').replace(
        "    log.close()\n", '    log.close()\n    print(open("runs/train.log").read())\n'
    )
    train, logs, reported = _convert_with(source, "logs", OPENER_MODULE)
    assert [line for line, message in reported if HANDLE_READ_BACK in message] == [OPEN_LINE + 1]
    assert "os.devnull" not in train + logs


HISTORY_IN_MAIN = code(
    """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    class History:
        def __init__(self, path):
            self.losses = []
            self.file = open(path, "w")

        def record(self, epoch, loss):
            self.losses.append(loss)
            self.file.write(f"{epoch},{loss}\\n")

        def best(self):
            return min(self.losses)


    def main():
        history = History("history.csv")
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            for data, target in loader:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
            history.record(epoch, loss.item())
        print(history.best())


    if __name__ == "__main__":
        main()
    """
)


def test_a_history_class_built_in_main_keeping_a_handle_receives_the_accelerator() -> None:
    """A ``History`` (no training class: it records, writes, and hands back its best value, so no
    file logger either) whose ``__init__`` keeps ``self.file = open(path, "w")``, built in
    ``main()``: the owner of classes gives it the accelerator (``classes_keeping_handles``), so
    the file is opened on the main process only. Before, the accelerator, a local of ``main()``,
    did not reach ``__init__``: the file stayed on every rank, reported (ACC916)."""
    facts = analyse(cst.parse_module(HISTORY_IN_MAIN), HISTORY_IN_MAIN)
    assert "History" in facts.classes_opening_handles and "History" in facts.training_classes
    output, changes = convert_text(HISTORY_IN_MAIN)
    assert "    def __init__(self, path, accelerator):\n" in output
    assert '        self.file = open(path if self.accelerator.is_main_process else os.devnull, "w")\n' in output
    assert output.index("accelerator = Accelerator()") < output.index('history = History("history.csv", accelerator)')
    assert _acc916(changes) == []
    again, _ = convert_text(output)
    assert again == output


def test_a_history_class_built_by_module_code_reads_the_module_accelerator() -> None:
    """Built by module-level code, the class reads the module's accelerator: it takes none."""
    source = HISTORY_IN_MAIN.replace("def main():\n", "if True:\n").replace(
        '\n\nif __name__ == "__main__":\n    main()\n', "\n"
    )
    output, changes = convert_text(source)
    assert "    def __init__(self, path):\n" in output
    assert '        self.file = open(path if accelerator.is_main_process else os.devnull, "w")\n' in output
    assert _acc916(changes) == []


def test_an_opener_another_call_uses_otherwise_stays_as_written() -> None:
    """The opener is also called for a ``with`` block (``with logs.open_log(...) as f:``), whose
    file this module may use otherwise: every call must keep the handle for writing alone, so the
    opener stays as written."""
    source = _opened_by('log = logs.open_log("runs", "train.log")').replace(
        "    log.close()\n",
        '    log.close()\n    with logs.open_log("runs", "done.txt") as done:\n        done.write("done\\n")\n',
    )
    _, logs, _ = _convert_with(source, "logs", OPENER_MODULE)
    assert '    return open(os.path.join(folder, name), "w")\n' in logs
