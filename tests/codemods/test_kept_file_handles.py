"""A file opened for writing into a name and written through on every rank (deep-text-recognition's
``log = open(f"./saved_models/{name}/log_train.txt", "a")`` in ``train()``, a notebook's module-level
``log``, a trainer's ``self.log`` in ``__init__``): the file-flow owner (``file_flow.kept_handles``)
says whether the main process alone can write it, and the side-effects rule opens it there
(``os.devnull`` on the others), reports it where it cannot, and leaves alone what is no such handle."""

from __future__ import annotations

import os

import libcst as cst
import pytest

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.program import ProgramModule, convert_program
from accel_convert.codemods.model.file_flow import HANDLE_OPENED_ELSEWHERE, HANDLE_READ_BACK, devnull_mode
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


@pytest.mark.parametrize(("mode", "why"), [("a+", "read through the handle"), ("x+", "read through the handle")])
def test_a_handle_the_main_process_alone_cannot_keep_is_reported(mode: str, why: str) -> None:
    output, changes = convert_text(TRAINING.replace('open("train.log", "w")', f'open("train.log", "{mode}")'))
    assert f'    log = open("train.log", "{mode}")\n' in output
    assert [line for line, message in _acc916(changes) if why in message] == [OPEN_LINE]


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


def test_a_handle_another_module_opens_is_reported_where_it_is_kept() -> None:
    """``log = logs.open_log(...)`` of ``logs.py``'s ``return open(path, "w")``, written through
    each epoch on every rank: the file-flow owner follows the program's function (its
    ``handle_openers``) and reports the handle where the script keeps it (ACC916). Opened on the
    main process only, the other module's function would run there alone, with what its own
    conversion adds (the barrier after its ``os.makedirs``): the other ranks would never reach it."""
    train = TRAINING.replace("import torch\n", "import logs\nimport torch\n", 1).replace(
        'log = open("train.log", "w")', 'log = logs.open_log("runs", "train.log")'
    )
    logs_module = ProgramModule("logs", cst.parse_module(OPENER_MODULE), OPENER_MODULE, False)
    outcomes = convert_program(
        [ProgramModule("train", cst.parse_module(train), train, False), logs_module], "train", Options()
    )
    opener = analyse(cst.parse_module(OPENER_MODULE), OPENER_MODULE)
    assert dict(opener.handle_openers) == {"open_log": "w"}
    reported = [(c.line, c.message) for c in outcomes["train"].changes if c.code == "ACC916"]
    assert [line for line, message in reported if HANDLE_OPENED_ELSEWHERE in message] == [OPEN_LINE + 1]
    assert '    log = logs.open_log("runs", "train.log"' in outcomes["train"].module.code
    assert "os.devnull" not in outcomes["train"].module.code
