"""side-effects (ACC116): file writes run on the main process only."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods import convert_module
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.rewrites.side_effects import SideEffectsCodemod
from tests.codemods.support import apply, assert_rewrites, code

SIDE_EFFECT_CASES = [
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            # outputs go here
            os.makedirs(args.out_dir, exist_ok=True)
            for epoch in range(3):
                save_image(sample, f"{args.out_dir}/sample_{epoch}.png")
                plt.savefig("loss.png")
        """,
        """
        def main():
            accelerator = Accelerator()
            # outputs go here
            if accelerator.is_main_process:
                os.makedirs(args.out_dir, exist_ok=True)
            accelerator.wait_for_everyone()
            for epoch in range(3):
                if accelerator.is_main_process:
                    save_image(sample, f"{args.out_dir}/sample_{epoch}.png")
                    plt.savefig("loss.png")
                accelerator.wait_for_everyone()
        """,
        id="folder-then-images",
    ),
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            with open("results.json", "w") as f:
                json.dump(results, f)
            with open("vocab.txt") as f:
                words = f.read().split()
            json.dump(history, open("history.json", mode="a"))
            os.remove("tmp.pt")
        """,
        """
        def main():
            accelerator = Accelerator()
            if accelerator.is_main_process:
                with open("results.json", "w") as f:
                    json.dump(results, f)
            accelerator.wait_for_everyone()
            with open("vocab.txt") as f:
                words = f.read().split()
            if accelerator.is_main_process:
                json.dump(history, open("history.json", mode="a"))
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                os.remove("tmp.pt")
        """,
        id="writes-guarded-reads-not-delete-waits",
    ),
    pytest.param(
        """
        import os
        args = parser.parse_args()
        os.makedirs("early", exist_ok=True)
        accelerator = Accelerator()
        shutil.rmtree("old_run")
        """,
        """
        import os
        args = parser.parse_args()
        os.makedirs("early", exist_ok=True)
        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree("old_run")
        """,
        id="module-level-only-after-the-accelerator-delete-waits",
    ),
]

SIDE_EFFECT_CASES.append(
    pytest.param(
        """
        def main():
            accelerator = Accelerator()
            for epoch in range(2):
                model.train()
            tokenizer.save_pretrained("out")
            torch.onnx.export(model, torch.randn(1, 2), "model.onnx")
        """,
        """
        def main():
            accelerator = Accelerator()
            for epoch in range(2):
                model.train()
            if accelerator.is_main_process:
                tokenizer.save_pretrained("out")
                torch.onnx.export(model, torch.randn(1, 2), "model.onnx")
            accelerator.wait_for_everyone()
        """,
        id="hugging-face-save-pretrained-and-onnx-export",
    )
)


@pytest.mark.parametrize("before, after", SIDE_EFFECT_CASES)
def test_side_effects(before: str, after: str) -> None:
    changes = assert_rewrites(SideEffectsCodemod(), before, after)
    assert changes and all(c.code == "ACC116" for c in changes)


def test_side_effects_without_the_accelerator_are_reported() -> None:
    source = code(
        """
        def plot(losses, path):
            plt.plot(losses)
            plt.savefig(path)
        """
    )
    output, changes = apply(SideEffectsCodemod(), source)
    assert output == source
    assert [(c.code, c.line, c.fixed) for c in changes] == [("ACC916", 3, False)]


ANIMATOR = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Animator:
    def __init__(self, path):
        self.path = path

    def add(self, x, y):
        with open(self.path, "a") as f:
            f.write(f"{x} {y}")


class CachedData(Dataset):
    def __init__(self, path):
        with open(path, "w") as f:
            f.write("cache")


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    animator = Animator("animator.txt")
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        animator.add(epoch, loss.item())
"""


def test_a_helper_class_reopening_its_file_is_created_on_the_main_process_only() -> None:
    """d2l's Animator appends to its file on every call (twice the lines on 2 processes): it is a
    file logger, created on the main process only with its calls guarded, so nothing is left to
    report. A dataset's own writes are left to the downloads rule (its construction runs first on
    the main process)."""
    outcome = convert_module(cst.parse_module(ANIMATOR), Options())
    assert [(c.code, c.line) for c in outcome.changes if c.code == "ACC916"] == []
    output = outcome.module.code
    assert 'animator = Animator("animator.txt") if accelerator.is_main_process else None' in output
    assert "        if accelerator.is_main_process:\n            animator.add(epoch, loss.item())" in output


def test_a_file_written_in_a_helper_class_method_is_reported_where_its_instance_gives_values_back() -> None:
    """An Animator whose ``add`` returns what it wrote is no logger to create on one process only
    (None on the others would fail where the value is read): the write is reported."""
    returning = ANIMATOR.replace(
        '            f.write(f"{x} {y}")\n', '            f.write(f"{x} {y}")\n        return y\n'
    )
    assert returning != ANIMATOR
    outcome = convert_module(cst.parse_module(returning), Options())
    reports = [(c.code, c.line) for c in outcome.changes if c.code == "ACC916"]
    assert reports == [("ACC916", 12)]


def test_a_helper_class_logging_in_init_and_giving_values_back_is_built_on_every_rank() -> None:
    """A class whose ``__init__`` opens a file for writing (``log = open(path, "a")``) and that
    gives values back from a method (deep-text-recognition's ``Batch_Balanced_Dataset`` hands out
    batches from ``get_batch()``) is no file logger: built on the main process only, the other
    ranks would fail at their first ``get_batch()``. Every rank builds it, handed the accelerator
    (``classes_keeping_handles``): its ``__init__`` opens the real file on the main process only
    (``os.devnull`` elsewhere) and its method writes there, so nothing is left to report."""
    logging = ANIMATOR.replace(
        "    def __init__(self, path):\n        self.path = path\n",
        '    def __init__(self, path):\n        self.path = path\n        log = open(path, "a")\n'
        '        log.write("start")\n        log.close()\n',
    )
    logging = logging.replace(
        '            f.write(f"{x} {y}")\n', '            f.write(f"{x} {y}")\n        return y\n'
    )
    assert logging.count("return y") == 1 and 'log = open(path, "a")' in logging
    outcome = convert_module(cst.parse_module(logging), Options())
    output = outcome.module.code
    assert '    animator = Animator("animator.txt", accelerator)\n' in output
    assert "is_main_process else None" not in output
    assert 'log = open(path if self.accelerator.is_main_process else os.devnull, "a")' in output
    assert "ACC916" not in [c.code for c in outcome.changes]


TRACKER_CASES = [
    pytest.param(
        """
        import wandb


        def main():
            accelerator = Accelerator()
            wandb.init(project="demo")
            for epoch in range(3):
                wandb.log({"epoch": epoch})
            wandb.finish()
        """,
        """
        import wandb


        def main():
            accelerator = Accelerator()
            if accelerator.is_main_process:
                wandb.init(project="demo")
            for epoch in range(3):
                if accelerator.is_main_process:
                    wandb.log({"epoch": epoch})
            if accelerator.is_main_process:
                wandb.finish()
        """,
        id="wandb-module-calls",
    ),
    pytest.param(
        """
        import mlflow
        import wandb as wb
        from torch.utils.tensorboard import SummaryWriter


        def main():
            accelerator = Accelerator()
            run = wb.init(project="demo")
            tb = SummaryWriter("runs")
            for step in range(3):
                run.log({"step": step})
                mlflow.log_metric("step", step)
                tb.add_scalar("step", step)
            tb.close()
        """,
        """
        import mlflow
        import wandb as wb
        from torch.utils.tensorboard import SummaryWriter


        def main():
            accelerator = Accelerator()
            run = wb.init(project="demo") if accelerator.is_main_process else None
            tb = SummaryWriter("runs") if accelerator.is_main_process else None
            for step in range(3):
                if accelerator.is_main_process:
                    run.log({"step": step})
                    mlflow.log_metric("step", step)
                    tb.add_scalar("step", step)
            if accelerator.is_main_process:
                tb.close()
        """,
        id="tracker-objects-created-on-main-and-passed-on",
    ),
]


@pytest.mark.parametrize("before, after", TRACKER_CASES)
def test_experiment_tracking_runs_on_the_main_process(before: str, after: str) -> None:
    changes = assert_rewrites(SideEffectsCodemod(), before, after)
    assert all(c.code == "ACC116" for c in changes)
    messages = {c.message for c in changes}
    assert messages <= {
        "experiment tracking on the main process only",
        "tracker created on the main process only (None on the others)",
    }
    assert "experiment tracking on the main process only" in messages


def test_tracking_where_the_accelerator_is_not_reachable_is_reported() -> None:
    source = code(
        """
        import wandb


        def report(history):
            wandb.log({"loss": history[-1]})
        """
    )
    output, changes = apply(SideEffectsCodemod(), source)
    assert output == source
    assert [(c.code, c.fixed) for c in changes] == [("ACC916", False)]
    assert "every rank logs it" in changes[0].message


TEMPORARY_DIRECTORY_SCRIPT = """
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tempfile.TemporaryDirectory() as workdir:
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        p = os.path.join(workdir, "best.pt")
        torch.save(model.state_dict(), {path})
        model.load_state_dict(torch.load({path}))
"""


@pytest.mark.parametrize(
    "path", ['os.path.join(workdir, "best.pt")', "p"], ids=["joined where it is written", "joined into a name first"]
)
def test_writes_into_a_temporary_directory_stay_on_every_rank(path: str) -> None:
    # Each process has its own ``TemporaryDirectory``: a write guarded to the main process would
    # leave the others nothing to read back (FileNotFoundError on rank 1).
    source = code(TEMPORARY_DIRECTORY_SCRIPT.replace("{path}", path))
    output = convert_module(cst.parse_module(source), Options(), source).module.code
    assert f"torch.save(accelerator.unwrap_model(model).state_dict(), {path})" in output
    assert "is_main_process" not in output
    assert "wait_for_everyone" not in output


def test_a_folder_created_before_a_save_gets_one_barrier() -> None:
    # The save waits for every rank (checkpoint rule); the folder's own barrier right before it
    # would be a second one in a row.
    source = code(
        """
        import os

        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
            model = nn.Linear(4, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            os.makedirs("checkpoint", exist_ok=True)
            torch.save(model.state_dict(), "checkpoint/last.pt")
        """
    )
    output = convert_module(cst.parse_module(source), Options(), source).module.code
    assert output.count("accelerator.wait_for_everyone()") == 1
    guard = output.index("if accelerator.is_main_process:\n        os.makedirs")
    assert guard < output.index("accelerator.wait_for_everyone()") < output.index("accelerator.save(")


FOLDER_HELPER_IN_TRY = code(
    """
    import os

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset


    def make_run_dir(path):
        os.makedirs(path)


    def make_cache(path):
        os.makedirs(path)


    def main():
        model = nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
        try:
            make_run_dir("runs")
        except FileExistsError:
            print("resuming")
        make_cache("cache")
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        torch.save(model.state_dict(), "runs/model.pt")


    if __name__ == "__main__":
        main()
    """
)


def test_a_folder_whose_error_a_handler_catches_is_left_to_every_rank_and_reported() -> None:
    """``try: make_run_dir(d)`` / ``except FileExistsError: print("resuming")``: on the main
    process only before a barrier, the main process would raise past the barrier into the handler
    (a hang on a second run); with ``exist_ok=True`` the handler would never run, even on one
    process. Left as written on every rank and reported (ACC916); ``make_cache``, called by every
    rank outside the ``try``, keeps its guard and barrier."""
    outcome = convert_module(cst.parse_module(FOLDER_HELPER_IN_TRY), Options())
    output = outcome.module.code
    assert "def make_run_dir(path):\n    os.makedirs(path)\n" in output
    guarded = "    if accelerator.is_main_process:\n        os.makedirs(path)\n    accelerator.wait_for_everyone()\n"
    assert f"def make_cache(path, accelerator):\n{guarded}" in output
    assert [(c.code, c.line, c.fixed) for c in outcome.changes if c.code == "ACC916"] == [("ACC916", 9, False)]
