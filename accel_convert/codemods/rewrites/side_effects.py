"""ACC116 side-effects: file writes and experiment tracking outside the accelerator run on the main process only.

Every rank runs the whole script, so ``save_image``, ``plt.savefig``, ``os.remove`` and result files
opened for writing would be written N times, at once, into the same paths, and every rank would
start its own TensorBoard writer or W&B/MLflow run and log its own numbers into it. Runs of such
statements are put under ``if accelerator.is_main_process:``; a tracker object is created on the
main process only (``writer = SummaryWriter(...) if accelerator.is_main_process else None``, so
that passing it on still works everywhere) and its logging calls are guarded. Creating an output folder is guarded the same
way and followed by ``accelerator.wait_for_everyone()``, so that no rank writes into the folder
before it exists. A write on one line with its ``if`` or ``for`` (``if not os.path.exists(d):
os.makedirs(d)``, ``if args.tensorboard: configure(...)``) is guarded as the whole statement, and so is
a file opened, written and dropped in one expression (``open(path, "w").write(text)``). The
trackers are TensorBoard's writers, W&B, MLflow, ``tensorboard_logger`` (``configure``,
``log_value``; its ``Logger``), visdom, Comet, Neptune and Aim. Where the accelerator is not
reachable the write is reported (ACC916).

A logger class that keeps a file open for writing (a CSV logger's ``self.file = open(path, "w")``,
of the script or of another module of the program, known by its qualified name) is a tracker too:
``log = CSVLogger(...) if accelerator.is_main_process else None``, its calls guarded, so the file
holds one header and every row once. So is a helper class deriving from nothing but ``object``
that reopens its file for writing on every call (``with open(self.path, "a") as f`` in ``write``),
returns nothing and trains nothing: every rank would append each row. A logger built right in a
call of the module's own function or class (``train(model, CSVLogger("log.csv"))``) is built so
in the call, and the parameter it fills is a tracker there. Its kept or written file is reported
(ACC916) only where some instance cannot be created so: there every rank writes its rows into it. A tracker
whose attributes code on every rank reads (``os.path.join(writer.log_dir, "training.log")``) is
created on every rank and reported (ACC916): None would fail there. So is ``wandb.init`` (with
``wandb.config.update``) where code on every rank reads the run's state (a sweep's ``config =
wandb.config``, ``wandb.run.name``): before ``init`` those reads raise.

A file opened for writing into a name and kept to write through (deep-text-recognition's ``log =
open(f"./saved_models/{name}/log_train.txt", "a")`` in ``train()``, a notebook's module-level
``log``, a trainer's ``self.log = open(path, "a")`` in ``__init__``), written on every rank, is
opened on the main process only the same way, ``os.devnull`` on the others, with no barrier: the
program model's file flow says that no code reads the file back (a file created exclusively,
``"x"``, gets ``os.devnull`` opened with ``"w"`` on the others: it exists; one read back through
the handle, ``"w+"``, a scratch file of their own, ``tempfile.TemporaryFile("w+")``, so each reads
back what it wrote). The accelerator is created above such an ``open`` (the conversion plan). A
handle another module's function (or method) opens and hands back (``log =
logs.open_log(path)``) is opened there the same way, where every module calling it keeps it so:
every rank calls the opener, which takes the accelerator. Where code may read it back, it reads
back through the handle what the file held (``"a+"``), not every rank reaches the ``open``, or no
accelerator reaches it (a function it does not reach), it stays on every rank and is reported
(ACC916). A handle the script writes only under a test of its rank (``if args.rank == 0:``) stays
as it is.

Deleting waits for every rank first (``wait_for_everyone()`` before the guard): another rank
may still be reading the file.

A file written into a folder each process makes for itself (``workdir = tempfile.mkdtemp()``, a
path built from it, or a parameter every call fills with one: ``save_vocab(words, workdir)``) is
written by every process, each into its own folder: guarded, the other processes would never
find it.

A folder created where no barrier can go is left on every rank and reported (ACC916), except in
the script's own download function when every call of it runs under ``main_process_first``
(ACC115): the main process creates it alone first, and the others find it. Where no accelerator
is reachable (fast-neural-style's ``check_paths(args)``, run before the accelerator is created), a
folder made under a test that it is missing (``if not os.path.exists(d): os.makedirs(d)``) is made
with ``os.makedirs(d, exist_ok=True)``: every rank runs it, and the ranks racing between the test
and the creation all find the folder instead of one raising ``FileExistsError``. So is a folder
made in a function some rank may not call (``def mkdir_p(path): os.makedirs(path)`` called under
``if not os.path.isdir(d):``, or under a test of a value each rank has for itself): a barrier
there would wait for a rank that never comes, so every rank calling it makes the folder, with
``exist_ok=True``, and none waits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import (
    accelerator_call,
    accelerator_name,
    callee_words,
    is_accelerator_method,
    name_words,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.imports import add_import, imports_module
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import (
    TIGHT_EQUAL,
    as_statement,
    binds_name,
    calls_in,
    dotted,
    keyword_is,
    names_in,
)
from accel_convert.codemods.engine.torch_names import (
    FILE_FETCHES,
    FOLDER_FUNCTIONS,
    NETWORK_FETCHES,
    TRACKER_CONSTRUCTORS,
    TRACKER_FUNCTIONS,
    TRACKER_RUN_STATE,
    TRACKER_SETUP,
    WRITING_FUNCTIONS,
    WRITING_METHODS,
)
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import walk
from accel_convert.codemods.model.file_flow import (
    HANDLE_READ_BACK,
    HANDLE_READ_THROUGH,
    SCRATCH,
    devnull_mode,
    file_logger_class,
    other_ranks_file,
)
from accel_convert.codemods.model.home import reached_library
from accel_convert.codemods.model.locality import (
    holds_work_of_every_rank,
    locality,
    locality_of,
    names_rank,
    tests_main_process,
)

#: The report of a folder created or deleted where a barrier cannot go.
UNGUARDED_FOLDER = "folder creation or deletion where not every rank would reach a barrier: left on every rank"
#: The report of a file written from a network fetch where a handler catches the fetch's error.
UNGUARDED_FETCH = (
    "download written where a handler catches its error and goes on (except requests.RequestException, "
    "URLError ...): left on every rank, each fetching and handling a failure as on one process (on the main "
    "process alone, a failed fetch would jump past the barrier the others wait at)"
)
#: The report of a file opened for writing and kept (``log = open(path, "a")``) where the
#: accelerator is, but the main process alone cannot write it: what it is, then why, then this.
KEPT_FILE_LEFT = "file opened for writing and kept to write through on every rank"
KEPT_FILE_LEFT_EFFECT = (
    "left on every rank, each writing its lines into it, one rank's over or after another's; open it on the main "
    "process only (open(path if accelerator.is_main_process else os.devnull, ...)) and let the others wait "
    "(accelerator.wait_for_everyone()) before they read it"
)


#: Functions that delete: every rank first finishes with the file, then the main process deletes.
DELETING_FUNCTIONS = frozenset({"os.remove", "os.unlink", "os.rmdir", "shutil.rmtree"})


class SideEffectsCodemod(Rule):
    code = "ACC116"
    name = "side-effects"
    providers = (locality,)
    fixes = {
        "ACC916": (
            "Guard the write with the main process: pass ``accelerator`` to the function and put the file write or tracker call under ``if accelerator.is_main_process:``. For ``wandb.config`` read by every process, call ``wandb.init`` on the main process only and hand the values the others need as arguments."
        ),
    }
    extra_codes = {
        "ACC916": (
            "side-effect-unreachable: a file write or tracker call where the accelerator is not "
            "reachable: every rank runs it"
        ),
    }
    examples = (
        Example(
            before=r"""
                import os

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        os.makedirs("results", exist_ok=True)
                        with open(f"results/epoch_{epoch}.txt", "w") as f:
                            f.write(f"{loss.item():.4f}\n")


                if __name__ == "__main__":
                    main()
            """,
            after=r"""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        if accelerator.is_main_process:
                            os.makedirs("results", exist_ok=True)
                        accelerator.wait_for_everyone()
                        if accelerator.is_main_process:
                            with open(f"results/epoch_{epoch}.txt", "w") as f:
                                f.write(f"{loss.item():.4f}\n")
                        accelerator.wait_for_everyone()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import json
                import os
                import tempfile

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_vocab(words, folder):
                    with open(os.path.join(folder, "vocab.json"), "w") as f:
                        json.dump(words, f)


                def main():
                    workdir = tempfile.mkdtemp()
                    save_vocab(["a", "b"], workdir)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    with open("train.log", "w") as f:
                        f.write("done")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import json
                import os
                import tempfile

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def save_vocab(words, folder):
                    with open(os.path.join(folder, "vocab.json"), "w") as f:
                        json.dump(words, f)


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    workdir = tempfile.mkdtemp()
                    save_vocab(["a", "b"], workdir)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    if accelerator.is_main_process:
                        with open("train.log", "w") as f:
                            f.write("done")
                    accelerator.wait_for_everyone()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    writer = SummaryWriter("runs/exp")
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        writer.add_scalar("train/loss", loss.item(), step)
                    writer.close()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    writer = SummaryWriter("runs/exp") if accelerator.is_main_process else None
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                        if accelerator.is_main_process:
                            writer.add_scalar("train/loss", loss.item(), step)
                    if accelerator.is_main_process:
                        writer.close()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # The script's own logger keeps its file open for writing: created on the main process
        # only, like a tracker, and its calls run there.
        Example(
            before=r"""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Logger:
                    def __init__(self, path):
                        self.f = open(path, "w")

                    def scalar(self, tag, value, step):
                        self.f.write(f"{step} {tag} {value}\n")


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    logger = Logger("log.txt")
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        logger.scalar("loss", loss.item(), step)


                if __name__ == "__main__":
                    main()
            """,
            after=r"""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Logger:
                    def __init__(self, path):
                        self.f = open(path, "w")

                    def scalar(self, tag, value, step):
                        self.f.write(f"{step} {tag} {value}\n")


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    logger = Logger("log.txt") if accelerator.is_main_process else None
                    for step, (data, target) in enumerate(loader):
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                        if accelerator.is_main_process:
                            logger.scalar("loss", loss.item(), step)


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A folder made where no accelerator is yet, under a test that it is missing: every rank
        # runs it, so each finds or makes it (``exist_ok=True``) instead of racing to FileExistsError.
        Example(
            before="""
                import os

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def check_paths(folder):
                    if not os.path.exists(folder):
                        os.makedirs(folder)


                def train(folder):
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), os.path.join(folder, "model.pt"))


                if __name__ == "__main__":
                    check_paths("out")
                    train("out")
            """,
            after="""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def check_paths(folder):
                    if not os.path.exists(folder):
                        os.makedirs(folder, exist_ok=True)


                def train(folder):
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(folder, "model.pt"))


                if __name__ == "__main__":
                    check_paths("out")
                    train("out")
            """,
        ),
        # Weights & Biases: the run is started on the main process alone, so every call that needs
        # it (``wandb.config.update`` raises before ``wandb.init``) goes there too.
        Example(
            before="""
                import argparse

                import torch
                import torch.nn as nn
                import wandb
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    wandb.init(project="demo", name="linear")
                    wandb.config.update(args)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
                    wandb.watch(model)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        wandb.log({"loss": loss.item()})
                    wandb.finish()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                import wandb
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--lr", type=float, default=0.1)
                    args = parser.parse_args()
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    if accelerator.is_main_process:
                        wandb.init(project="demo", name="linear")
                        wandb.config.update(args)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    if accelerator.is_main_process:
                        wandb.watch(model)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                        if accelerator.is_main_process:
                            wandb.log({"loss": loss.item()})
                    if accelerator.is_main_process:
                        wandb.finish()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A sweep reads its hyperparameters from the run (``config = wandb.config``): guarded, those
        # reads would raise on the other ranks, so ``wandb.init`` stays where it was, and says so.
        Example(
            code="ACC916",
            before="""
                import torch
                import torch.nn as nn
                import wandb
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    wandb.init(project="sweeps", config={"lr": 0.1, "batch_size": 8})
                    config = wandb.config
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=config.batch_size)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data.to(device)), target.to(device))
                        loss.backward()
                        optimizer.step()
                        wandb.log({"loss": loss.item()})


                if __name__ == "__main__":
                    main()
            """,
            message="wandb.config is read by code every rank runs: wandb.init stays on every rank, so each process "
            "starts a run of its own (its logging calls stay on the main process); under a sweep agent, check that "
            "every process gets the same values",
        ),
        Example(
            code="ACC916",
            before="""
                import matplotlib.pyplot as plt
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def plot(losses, path):
                    plt.plot(losses)
                    plt.savefig(path)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    losses = []
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                    return losses


                if __name__ == "__main__":
                    plot(main(), "losses.png")
            """,
            message="file write where the accelerator is not reachable: every rank runs it",
        ),
        Example(
            before="""
                import json

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                with open("settings.json") as f:
                    settings = json.load(f)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=settings["lr"])
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
            """,
            after="""
                import json

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                with open("settings.json") as f:
                    settings = json.load(f)
                accelerator = Accelerator()
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=settings["lr"])
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for x, y in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(x), y))
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
        Example(
            before=r"""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
                    loader = DataLoader(data, batch_size=8)
                    model = nn.Linear(8, 2)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in loader:
                        optimizer.zero_grad()
                        nn.functional.cross_entropy(model(x), y).backward()
                        optimizer.step()
                    test_loader = DataLoader(data, batch_size=8)
                    with open("predictions.txt", "w") as out, torch.no_grad():
                        for x, y in test_loader:
                            output = model(x)
                            for label in output.argmax(1).tolist():
                                out.write(f"{label}\n")


                if __name__ == "__main__":
                    main()
            """,
            after=r"""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
                    loader = DataLoader(data, batch_size=8)
                    model = nn.Linear(8, 2)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for x, y in loader:
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.cross_entropy(model(x), y))
                        optimizer.step()
                    test_loader = DataLoader(data, batch_size=8)
                    test_loader = accelerator.prepare(test_loader)
                    with open("predictions.txt" if accelerator.is_main_process else os.devnull, "w") as out, torch.no_grad():
                        for x, y in test_loader:
                            output = model(x)
                            output = accelerator.gather_for_metrics(output)
                            for label in output.argmax(1).tolist():
                                out.write(f"{label}\n")
                    accelerator.wait_for_everyone()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # A file kept open for writing into a name and written on every rank: opened on the main
        # process only, the others writing to os.devnull (nothing reads it back).
        Example(
            before=r"""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    log = open("log_train.txt", "a")
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        log.write(f"epoch {epoch} loss {loss.item():.4f}\n")
                    log.close()


                if __name__ == "__main__":
                    main()
            """,
            after=r"""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    log = open("log_train.txt" if accelerator.is_main_process else os.devnull, "a")
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        log.write(f"epoch {epoch} loss {loss.item():.4f}\n")
                    log.close()


                if __name__ == "__main__":
                    main()
            """,
        ),
        # Read back later in the run: the main process alone writing it, another rank could read it
        # before it is complete.
        Example(
            code="ACC916",
            before=r"""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    log = open("log_train.txt", "a")
                    for epoch in range(3):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        log.write(f"epoch {epoch} loss {loss.item():.4f}\n")
                    log.close()
                    with open("log_train.txt") as f:
                        print(f.read())


                if __name__ == "__main__":
                    main()
            """,
            message=f"{KEPT_FILE_LEFT}, {HANDLE_READ_BACK}: {KEPT_FILE_LEFT_EFFECT}",
        ),
        Example(
            before="""
                import matplotlib.pyplot as plt
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def plot(losses, path):
                    plt.plot(losses)
                    plt.savefig(path)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    losses = []
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                        losses.append(loss.item())
                    plot(losses, "losses.png")


                if __name__ == "__main__":
                    main()
            """,
            code="ACC916",
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        # A library keeping a file open for writing is converted without torch (see
        # codemods._nothing_to_convert): its logger's file is reported here. So is one whose
        # functions the accelerator reaches (a callback appending to a file): its writes are guarded.
        # And one creating folders: where no accelerator is, they are made safe on every rank.
        return facts.uses_torch or facts.keeps_files_for_writing or facts.creates_folders or reached_library(facts)

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        callees = WRITING_FUNCTIONS | FOLDER_FUNCTIONS | DELETING_FUNCTIONS | TRACKER_FUNCTIONS | TRACKER_CONSTRUCTORS
        words = callee_words(facts, callees | {"open"}) | WRITING_METHODS | name_words(facts.trackers)
        # Calls of the script's own download functions: where the downloads rule (ACC115) puts
        # them under main_process_first, what their bodies leave on every rank is run first by
        # the main process alone (see _MainProcessGuard._report_after_download_calls).
        words |= facts.download_functions
        lines = facts.lines_mentioning(words) | {line for line, _ in facts.loggers_built_in_calls}
        rewriter = _MainProcessGuard(facts, lines, _trackers_read(module, facts))
        new_module = module.visit(rewriter)
        for used, name in ((rewriter.devnull_used, "os"), (rewriter.tempfile_used, "tempfile")):
            if used and not imports_module(new_module, name):
                new_module = add_import(
                    new_module,
                    cast(cst.SimpleStatementLine, cst.parse_statement(f"import {name}")),
                    options.import_style,
                )
        return new_module, rewriter.changes(module)


class _MainProcessGuard(RuleTransformer):
    def __init__(self, facts: ScriptFacts, lines: set[int], trackers_read: Mapping[str, str] | None = None) -> None:
        super().__init__(facts, lines)
        #: Trackers whose attributes code outside their logging calls reads, with the first
        #: attribute read (``writer`` → ``log_dir``); ``wandb`` when its run state is read
        #: (``wandb.config.lr``).
        self._trackers_read: Mapping[str, str] = trackers_read or {}
        self._guarded_depth = 0
        #: Each node this walk left (by identity) → (that node, the original it was made from): the
        #: node is held so that its id is not taken by a later one while the walk still asks.
        self._original_of: dict[int, tuple[cst.CSTNode, cst.CSTNode]] = {}
        #: Original positions of the calls of download functions that stand where the downloads
        #: rule puts them under ``main_process_first`` (a statement every rank reaches, where the
        #: accelerator is).
        self._downloads_run_first: set[tuple[int, int]] = set()
        #: Download function → the folder creations in it left on every rank (reported unless every
        #: call of the function runs under ``main_process_first``).
        self._in_download_functions: dict[str, list[cst.CSTNode]] = {}
        #: Logger class → the files its methods open and keep or write, with their reports (made
        #: unless every instance of it is created on the main process only), and → its
        #: constructions made so here.
        self._kept_by_loggers: dict[str, list[tuple[cst.CSTNode, str]]] = {}
        self._loggers_on_main_process: dict[str, int] = {}
        #: Per enclosing ``with``: whether it opens its file on the main process alone.
        self._opened_on_main_process: list[bool] = []
        #: Whether a file was opened so (the module needs ``import os``).
        self.devnull_used = False
        self.tempfile_used = False

    # Writes are whole statements: the walk never needs to go into expressions or model classes.
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # A helper class of the script (d2l's Animator, a CSV logger) may write files in its
        # methods, on every rank: walked so that they are guarded or reported. Model classes write
        # nothing worth a walk; a dataset's download writes are the downloads rule's (ACC115: its
        # construction runs under ``main_process_first``).
        if self.in_training_class():
            return True
        name = node.name.value
        return name not in self.facts.dataset_classes and name not in self.facts.model_classes

    def visit_If(self, node: cst.If) -> None:
        if tests_main_process(node.test, self.accelerator):
            self._guarded_depth += 1

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        if tests_main_process(original_node.test, self.accelerator):
            self._guarded_depth -= 1
        return updated_node

    def visit_With(self, node: cst.With) -> None:
        self._opened_on_main_process.append(self._opens_for_every_rank(node))

    def leave_With(
        self, original_node: cst.With, updated_node: cst.With
    ) -> cst.With | cst.FlattenSentinel[cst.BaseStatement]:
        """``with open(path, "w") as out:`` around code the processes run together (an evaluation
        loop writing its predictions): the block stays on every rank and the file is opened on
        the main process alone, the others writing to ``os.devnull`` (guarded, the others would
        wait at the block's first collective; left, every rank would truncate and write the file).
        The processes wait for each other after it, as after a guarded write: one may read the
        file next."""
        if not self._opened_on_main_process.pop():
            return updated_node
        items = [
            item.with_changes(item=self._opened_where_main(item.item)) if self._opens_on_every_rank(item.item) else item
            for item in updated_node.items
        ]
        self.findings.add(
            original_node,
            SideEffectsCodemod.code,
            "file opened for writing on the main process only (os.devnull on the others): the block runs on every rank",
            True,
        )
        barrier = cst.SimpleStatementLine([cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))])
        return cst.FlattenSentinel([updated_node.with_changes(items=items), barrier])

    def _opens_for_every_rank(self, node: cst.With) -> bool:
        """Whether ``node`` opens a file for writing around work the processes do together, where
        the accelerator is and every rank reaches it."""
        opened = [item.item for item in node.items if self._opens_on_every_rank(item.item)]
        if not (
            not self._guarded_depth
            and bool(opened)
            and self.accelerator_reachable()
            and self.every_rank_reaches_here()
            and holds_work_of_every_rank(node, self.facts)
        ):
            return False
        # Not a file whose earlier content the block may read back through it (``"a+"``, ``"r+"``):
        # the file-flow owner keeps it on every rank, and it is reported.
        if any(other_ranks_file(self.facts.open_mode(call, self.scope) or "w") is None for call in opened):
            self.findings.add(
                node, "ACC916", f"{KEPT_FILE_LEFT}, {HANDLE_READ_THROUGH}: {KEPT_FILE_LEFT_EFFECT}", False
            )
            return False
        return True

    def _opens_on_every_rank(self, call: cst.BaseExpression) -> bool:
        """``open(path, "w")``, not ``open(path if <main process> else os.devnull, "w")`` (a
        converted script)."""
        if not self.facts.opens_for_writing(call, self.scope):
            return False
        path = cast(cst.Call, call).args[0].value if cast(cst.Call, call).args else None
        return not (isinstance(path, cst.IfExp) and tests_main_process(path.test, self.accelerator))

    def _handle_opened_on_main_process(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """``log = open(path, "a")`` (or ``self.log = ...``) written through on every rank and read
        back by no one (the file-flow owner's :class:`~codemods.model.file_flow.KeptHandles`),
        where every rank reaches it: ``log = open(path if <main process> else os.devnull, "a")``,
        the same rewrite as a ``with`` block's (every rank keeps a handle to write through, the
        main process alone writes the file; no rank waits, since none reads it). Where the owner
        says the main process alone cannot write it (read back, a ``+`` or ``x`` mode), or not
        every rank reaches it (but under a test of a rank, the script's own choice), it stays and
        is reported (ACC916). None where nothing is rewritten."""
        call = self._kept_handle_open(statement)
        if call is None:
            return None
        original = self._original(statement)
        site = self.site(call)
        reason = self.facts.handles_left_on_every_rank.get((site.line, site.column))
        if reason is None and (site.line, site.column) not in self.facts.handles_main_process_writes:
            return None
        if reason is None and self._opened_elsewhere(call):
            return None  # the other module's opener opens it on the main process only
        if reason is None and not self.every_rank_reaches_here():
            if any(isinstance(node, cst.If) and names_rank(node.test) for node in self._anchors):
                return None
            reason = "where not every rank reaches it"
        if reason is not None:
            self.findings.add(original, "ACC916", f"{KEPT_FILE_LEFT}, {reason}: {KEPT_FILE_LEFT_EFFECT}", False)
            return None
        assert isinstance(statement, cst.SimpleStatementLine)
        small = cast(cst.Assign | cst.Return, statement.body[0])
        self.findings.add(
            original,
            SideEffectsCodemod.code,
            "file kept for writing opened on the main process only (os.devnull on the others): every rank writes "
            "through it",
            True,
        )
        return statement.with_changes(body=[small.with_changes(value=self._opened_where_main(call))])

    def _kept_handle_open(self, statement: cst.BaseStatement) -> cst.Call | None:
        """The ``open`` call of ``name = open(path, "w")`` (or of ``return open(path, "w")``, in a
        function handing the file to its callers) as the script wrote it (not a file of this
        process alone, nor opened on the main process already: a converted script)."""
        if not isinstance(statement, cst.SimpleStatementLine) or self.writes_per_rank_here():
            return None
        small = statement.body[0]
        if len(statement.body) != 1 or not isinstance(small, (cst.Assign, cst.Return)) or small.value is None:
            return None
        if not self._opens_on_every_rank(small.value) and not self._opened_elsewhere(small.value):
            return None
        paths = locality_of(self.facts).per_process_paths
        return None if paths and names_in(small.value) & paths else cast(cst.Call, small.value)

    def _opened_elsewhere(self, value: cst.BaseExpression) -> bool:
        """A call of another module's function (or method) returning a file it opens for writing
        (``logs.open_log(path)``) that the file-flow owner says is kept: opened on the main
        process only by the opener, or left on every rank (reported)."""
        if not isinstance(value, cst.Call) or self.facts.opens_for_writing(value, self.scope):
            return False
        site = self.site(value)
        key = (site.line, site.column)
        return key in self.facts.handles_main_process_writes or key in self.facts.handles_left_on_every_rank

    def _opened_where_main(self, call: cst.BaseExpression) -> cst.BaseExpression:
        """``open(path, "w")`` → ``open(path if <main process> else os.devnull, "w")``; where
        ``os.devnull`` opens in another mode (the file-flow owner's :func:`devnull_mode`: ``"x"``
        → ``"w"``), ``open(path, "x") if <main process> else open(os.devnull, "w")``; where the
        others read back through the handle what they wrote (``"w+"``: the owner's
        :func:`other_ranks_file`), ``open(path, "w+") if <main process> else
        tempfile.TemporaryFile("w+")``."""
        assert isinstance(call, cst.Call)
        devnull = cst.Attribute(cst.Name("os"), cst.Name("devnull"))
        mode = self.facts.open_mode(call, self.scope) or "w"
        first = call.args[0]
        if other_ranks_file(mode) == SCRATCH:
            self.tempfile_used = True
            return cst.IfExp(test=self._main_process(), body=call, orelse=_scratch_file(call, devnull_mode(mode)))
        self.devnull_used = True
        if devnull_mode(mode) == mode:
            where = cst.IfExp(test=self._main_process(), body=first.value, orelse=devnull)
            return call.with_changes(args=[first.with_changes(value=where), *call.args[1:]])
        args = [
            arg.with_changes(value=_mode_literal(arg.value, devnull_mode(mode)))
            if (arg.keyword is None and index == 1) or (arg.keyword is not None and arg.keyword.value == "mode")
            else arg
            for index, arg in enumerate(call.args)
        ]
        elsewhere = call.with_changes(args=[first.with_changes(value=devnull), *args[1:]])
        return cst.IfExp(test=self._main_process(), body=call, orelse=elsewhere)

    def _original(self, statement: cst.CSTNode) -> cst.CSTNode:
        """The original node ``statement`` was made from (itself where this walk did not make it)."""
        return self._original_of.get(id(statement), (statement, statement))[1]

    def leaving_node(self, original_node, updated_node):
        result = super().leaving_node(original_node, updated_node)
        if isinstance(result, cst.CSTNode):
            self._original_of[id(result)] = (result, original_node)
        return result

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if self.accelerator_reachable() and self.every_rank_reaches_here() and not self._guarded_depth:
            self._note_download_calls(updated_node.body)
        if self._guarded_depth or not self.accelerator_reachable():
            body = self._folders_made_on_every_rank(original_node, updated_node.body)
            self._report_unreachable(body)
            return updated_node if body is updated_node.body else updated_node.with_changes(body=body)
        new_body = self._guard_runs(updated_node.body)
        return updated_node if new_body is None else updated_node.with_changes(body=new_body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        start = _first_statement_after_accelerator(updated_node.body, self.accelerator)
        self._report_handles_unreachable(updated_node.body[:start])
        if start is None:
            self._report_after_download_calls()
            self._report_kept_by_loggers()
            return updated_node
        head, tail = list(updated_node.body[:start]), list(updated_node.body[start:])
        self._note_download_calls(tail)
        self._report_after_download_calls()
        new_tail = self._guard_runs(tail)
        self._report_kept_by_loggers()
        return updated_node if new_tail is None else updated_node.with_changes(body=[*head, *new_tail])

    def _report_handles_unreachable(self, statements: Sequence[cst.BaseStatement]) -> None:
        """Module-level code before the accelerator (or in a module that does not create it)
        opening a file every rank writes through (the file-flow owner's
        :class:`~codemods.model.file_flow.KeptHandles`): reported (ACC916)."""
        main_only, left = self.facts.handles_main_process_writes, self.facts.handles_left_on_every_rank
        for statement in statements if main_only or left else ():
            call = self._kept_handle_open(statement)
            site = None if call is None else self.site(call)
            if site is not None and ((site.line, site.column) in main_only or (site.line, site.column) in left):
                self.findings.add(self._original(statement), "ACC916", KEPT_HANDLE_UNREACHABLE, False)

    def _report_kept_by_loggers(self) -> None:
        """The file a logger class keeps open for writing, reported (ACC916) unless every instance
        of it is created on the main process only: each of its constructions in this module
        (``log = CSVLogger(...) if accelerator.is_main_process else None``), or, for a module of a
        program, each in the modules importing it, where the accelerator reaches every one."""
        seeds = self.facts.program
        reached = seeds.accelerator_reaches if seeds is not None else frozenset()
        for cls, statements in self._kept_by_loggers.items():
            constructions = len(self.facts.call_sites.get(cls, ()))
            made = self._loggers_on_main_process.get(cls, 0)
            if (constructions and made == constructions) or (not constructions and cls in reached):
                continue
            for statement, message in statements:
                self.findings.add(statement, "ACC916", message, False)

    def _note_download_calls(self, statements: Sequence[cst.BaseStatement]) -> None:
        """Record the calls of download functions in these statements (of a block every rank
        reaches, where the accelerator is): the downloads rule puts each such line under
        ``main_process_first``."""
        if not self.facts.download_functions:
            return
        for statement in statements:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for call in calls_in(statement):
                if isinstance(call.func, cst.Name) and call.func.value in self.facts.download_functions:
                    site = self.facts.origins.site(call)
                    if site is not None:
                        self._downloads_run_first.add((site.line, site.column))

    def _report_after_download_calls(self) -> None:
        """A folder created inside the script's download function, where not every rank would
        reach a barrier (``if not os.path.exists(path): os.makedirs(...)``): when every call of
        the function runs under ``main_process_first``, the main process creates it alone first
        and the others find it; otherwise it is reported as anywhere else."""
        for function, statements in self._in_download_functions.items():
            calls = {(site.line, site.column) for site in self.facts.call_sites.get(function, ())}
            if calls and calls <= self._downloads_run_first:
                continue
            for statement in statements:
                self.findings.add(statement, "ACC916", UNGUARDED_FOLDER, False)

    def _guard_runs(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        """Group consecutive writing statements under one main-process guard; None if none.
        Folder creation and deletion need a barrier too: where not every rank would reach it,
        they are left to run on every rank, and reported."""
        runs = _GuardedRuns(self._guarded, self.facts, self.scope)
        barrier_safe = self.every_rank_reaches_here()
        enclosing = next(
            (node for node in reversed(self._anchors) if isinstance(node, cst.BaseCompoundStatement)), None
        )
        # A block whose whole statement is a write is guarded one level up, where it stands.
        whole_statement_guarded = enclosing is not None and _write_kind(enclosing, self.facts, self.scope) is not None
        for statement in statements:
            if self._kept_for_run_state(statement):
                runs.keep(statement)
                continue
            created = (
                self._tracker_created_on_main_process(statement)
                or self._loggers_built_in_calls(statement)
                or self._handle_opened_on_main_process(statement)
            )
            if created is not None:
                runs.add_rewritten(created)
                continue
            kind = self._kind_to_guard(statement)
            # A folder made or removed where a handler catches its error and goes on: no barrier
            # and no ``exist_ok`` (see ``error_caught_here``), left to every rank, reported.
            caught = kind in ("folder", "delete") and self.error_caught_here()
            if kind in ("folder", "delete") and (not barrier_safe or caught):
                if whole_statement_guarded:
                    return None
                made = self._folder_made_by_each_caller(statement) if kind == "folder" and not caught else None
                if made is not None:
                    runs.add_rewritten(made)
                    continue
                self._report_unguarded(statement, kind)
                kind = None
            if kind is None:
                runs.keep(statement)
            else:
                runs.add_write(statement, kind)
        runs.flush()
        return runs.result if runs.changed else None

    def _kind_to_guard(self, statement: cst.BaseStatement) -> str | None:
        """What ``statement`` writes (see :func:`_write_kind`), None where it stays on every rank
        as it is: in an evaluation loop the locality owner lets run per process (each writes the
        files of its own batches; guarded, the others' would be lost), or a fetch whose error a
        handler catches (see :meth:`_fetch_error_caught`)."""
        kind = _write_kind(statement, self.facts, self.scope)
        if kind in ("write", "folder", "delete") and self.writes_per_rank_here():
            return None
        if kind == "write" and self._fetch_error_caught(statement):
            return None
        return kind

    def _fetch_error_caught(self, statement: cst.BaseStatement) -> bool:
        """Whether ``statement`` (a file write) fetches what it writes where a handler catches the
        fetch's error and goes on: then it stays on every rank, reported (ACC916), since on the
        main process alone a failed fetch would skip the barrier the other ranks wait at."""
        if not (_fetches(statement, self.facts, self.scope) and self.error_caught_here(fetching=True)):
            return False
        self.findings.add(self._original(statement), "ACC916", UNGUARDED_FETCH, False)
        return True

    def _folder_made_by_each_caller(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """``os.makedirs(d)`` (alone, or as the body of an ``if``: ``if not os.path.exists(d):
        os.makedirs(d)``) in a function some rank may not call (``if not os.path.isdir(d):
        mkdir_p(d)``, where the main process may make the folder before another rank tests it):
        a barrier there would wait for a rank that never comes. Every rank calling it makes the
        folder, ``os.makedirs(d, exist_ok=True)``, so that the ranks racing to create it all find
        it; None for any other statement, or outside such a function."""
        if not self.in_function_some_ranks_skip():
            return None
        if isinstance(statement, cst.If) and isinstance(statement.body, cst.IndentedBlock):
            made = [self._made_with_exist_ok(child) for child in statement.body.body]
            if any(child is None for child in made):
                return None
            body = statement.body.with_changes(body=made)
            return statement.with_changes(body=body)
        return self._made_with_exist_ok(statement)

    def _made_with_exist_ok(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """``os.makedirs(d)`` → ``os.makedirs(d, exist_ok=True)``, reported; None for any other
        statement."""
        call = _folder_creation(statement, self.facts, self.scope)
        if call is None:
            return None
        assert isinstance(statement, cst.SimpleStatementLine)
        self.findings.add(
            self._original(statement),
            SideEffectsCodemod.code,
            "folder created in a function some rank may not call: os.makedirs(..., exist_ok=True) on every rank "
            "calling it (a barrier there would wait for the others), so that the ranks racing to create it all "
            "find it",
            True,
        )
        return statement.with_changes(body=[statement.body[0].with_changes(value=_with_exist_ok(call))])

    def _report_unguarded(self, statement: cst.BaseStatement, kind: str) -> None:
        """A folder created or deleted where not every rank would reach a barrier: left to run on
        every rank and reported (in the script's download function, only once it is known
        whether every call of it runs under ``main_process_first``)."""
        original = self._original(statement)
        if kind == "folder" and self.scope and self.scope[0] in self.facts.download_functions:
            self._in_download_functions.setdefault(self.scope[0], []).append(original)
        else:
            self.findings.add(original, "ACC916", UNGUARDED_FOLDER, False)

    def _main_process(self) -> cst.Attribute:
        return cst.Attribute(value=cst.Name(self.accelerator), attr=cst.Name("is_main_process"))

    def _tracker_created_on_main_process(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """``writer = SummaryWriter(...)`` → ``... if accelerator.is_main_process else None``.

        Not a tracker whose attributes every rank reads outside its logging calls
        (``logging.basicConfig(filename=os.path.join(writer.log_dir, ...))``, a checkpoint path
        built from it and handed to a function that waits for every rank): None there would fail
        on the other ranks. It is created on every rank and reported; its logging calls are still
        guarded, so the other ranks' event files stay empty."""
        if _tracker_creation(statement, self.facts, self.scope) is None:
            return None
        assert isinstance(statement, cst.SimpleStatementLine)
        assign = statement.body[0]
        assert isinstance(assign, cst.Assign)
        read = sorted(target for target in _assigned_names(assign) if target in self._trackers_read)
        if read:
            attribute = self._trackers_read[read[0]]
            self.findings.add(
                self._original(statement),
                "ACC916",
                f"{read[0]}'s attributes ({read[0]}.{attribute} ...) are read by code every rank runs: the tracker "
                "is created on every rank (its logging calls on the main process only, the other ranks' files stay "
                "empty)",
                False,
            )
            return None
        self.findings.add(
            self._original(statement),
            SideEffectsCodemod.code,
            "tracker created on the main process only (None on the others)",
            True,
        )
        created = _tracker_creation(statement, self.facts, self.scope)
        logger = file_logger_class(self.facts, created.func, self.scope) if created is not None else None
        if logger is not None:
            self._loggers_on_main_process[logger] = self._loggers_on_main_process.get(logger, 0) + 1
        value = cst.IfExp(test=self._main_process(), body=assign.value, orelse=cst.Name("None"))
        return statement.with_changes(body=[assign.with_changes(value=value)])

    def _loggers_built_in_calls(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """``train(model, CSVLogger("log.csv"))`` → ``train(model, CSVLogger("log.csv") if
        accelerator.is_main_process else None)``: a logger built right in a call of the module's
        own function or class (``file_flow.file_loggers``), whose parameter is a tracker there."""
        if not self.facts.loggers_built_in_calls or not isinstance(statement, cst.SimpleStatementLine):
            return None
        built = _LoggersBuiltInCalls(self.facts, self._main_process(), self.scope)
        rewritten = cast(cst.SimpleStatementLine, statement.visit(built))
        if not built.classes:
            return None
        for cls in built.classes:
            self._loggers_on_main_process[cls] = self._loggers_on_main_process.get(cls, 0) + 1
        self.findings.add(
            self._original(statement),
            SideEffectsCodemod.code,
            "logger built in the call on the main process only (None on the others)",
            True,
        )
        return rewritten

    def _kept_for_run_state(self, statement: cst.BaseStatement) -> bool:
        """``wandb.init(...)`` (or ``wandb.config.update(args)``) where code every rank runs reads
        ``wandb.config`` or ``wandb.run``: kept on every rank, where the main-process guard would
        make that read raise on the others; ``wandb.init`` is reported (ACC916)."""
        if "wandb" not in self._trackers_read or not isinstance(statement, cst.SimpleStatementLine):
            return False
        small = statement.body[0] if len(statement.body) == 1 else None
        value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
        if not isinstance(value, cst.Call):
            return False
        if isinstance(small, cst.Assign) and _assigned_names(small) & set(self._trackers_read):
            return False  # its own attributes are read: reported where it is created
        name = self.facts.callee_name(value.func)
        if name not in TRACKER_SETUP:
            return False
        if name in TRACKER_CONSTRUCTORS:
            read = self._trackers_read["wandb"]
            self.findings.add(
                self._original(statement),
                "ACC916",
                f"{read} is read by code every rank runs: wandb.init stays on every rank, so each process starts "
                "a run of its own (its logging calls stay on the main process); under a sweep agent, check that "
                "every process gets the same values",
                False,
            )
        return True

    def _guarded(self, run: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        leading = as_statement(run[0]).leading_lines
        body = [run[0].with_changes(leading_lines=()), *run[1:]]
        guard = cst.If(test=self._main_process(), body=cst.IndentedBlock(body=body), leading_lines=leading)
        kind = _write_kind(run[0], self.facts, self.scope)
        message = (
            "experiment tracking on the main process only" if kind == "track" else "file write on the main process only"
        )
        for statement in run:
            self.findings.add(self._original(statement), SideEffectsCodemod.code, message, True)
        if kind == "track":
            return [guard]  # nothing reads what a tracker logs: no rank waits for it
        barrier = cst.SimpleStatementLine([cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))])
        if kind == "folder":
            return [guard, barrier]
        if kind == "delete":
            return [barrier.with_changes(leading_lines=leading), guard.with_changes(leading_lines=())]
        if self.every_rank_reaches_here():
            # Other ranks may read the file next (a vocabulary the tokenizer loads): they wait
            # until the main process has written it.
            return [guard, barrier]
        return [guard]

    def _folders_made_on_every_rank(
        self, block: cst.IndentedBlock, statements: Sequence[cst.BaseStatement]
    ) -> Sequence[cst.BaseStatement]:
        """``if not os.path.exists(d): os.makedirs(d)`` where no accelerator is (fast-neural-style's
        ``check_paths(args)``, run before the accelerator is created): every rank runs it, and the
        ranks race between the test and the creation, so one of them raises ``FileExistsError``.
        The creation becomes ``os.makedirs(d, exist_ok=True)``: the test already says the folder
        is only made when it is missing, so one process does what it did, and every rank finds or
        makes the folder. A creation no test of its path guards is left as it is (it raises when
        the folder exists, on one process too) and reported."""
        if self._guarded_depth or not self._anchors:
            return statements
        branch = self._anchors[-1]
        if not isinstance(branch, cst.If) or branch.body is not block:
            return statements
        result = list(statements)
        for index, statement in enumerate(statements):
            call = _folder_creation(statement, self.facts, self.scope)
            if call is None or not _tests_missing(branch.test, call.args[0].value, self.facts, self.scope):
                continue
            assert isinstance(statement, cst.SimpleStatementLine)
            result[index] = statement.with_changes(body=[statement.body[0].with_changes(value=_with_exist_ok(call))])
            self.findings.add(
                self._original(statement),
                SideEffectsCodemod.code,
                "folder created where no accelerator is: os.makedirs(..., exist_ok=True), so that the ranks racing "
                "to create it all find it",
                True,
            )
        return result

    def _report_unreachable(self, statements: Sequence[cst.BaseStatement]) -> None:
        if self._guarded_depth:
            return
        for statement in statements:
            kind = _write_kind(statement, self.facts, self.scope)
            if kind is None and _tracker_creation(statement, self.facts, self.scope) is not None:
                message = "tracker created where the accelerator is not reachable: every rank starts one"
            elif kind == "track":
                message = "experiment tracking where the accelerator is not reachable: every rank logs it"
            elif kind == "folder" and any(keyword_is(call, "exist_ok", "True") for call in calls_in(statement)):
                continue  # ``os.makedirs(d, exist_ok=True)`` on every rank: each finds or makes the folder
            elif kind is not None:
                message = "file write where the accelerator is not reachable: every rank runs it"
            elif _keeps_file_open_for_writing(statement, self.facts, self.scope):
                in_logger = bool(self.scope) and self.scope[0] in self.facts.file_logger_classes
                message = KEPT_FILE_UNREACHABLE if in_logger else KEPT_HANDLE_UNREACHABLE
            else:
                continue
            original = self._original(statement)
            if kind in (None, "write") and self.scope and self.scope[0] in self.facts.file_logger_classes:
                # A logger class's file: known once every construction of the class is seen (see
                # leave_Module).
                self._kept_by_loggers.setdefault(self.scope[0], []).append((original, message))
                continue
            self.findings.add(original, "ACC916", message, False)


class _LoggersBuiltInCalls(cst.CSTTransformer):
    """Each logger construction of ``facts.loggers_built_in_calls`` → ``... if <main> else None``;
    ``classes`` the logger classes so built (one entry per construction)."""

    def __init__(self, facts: ScriptFacts, main_process: cst.BaseExpression, scope: tuple[str, ...]) -> None:
        super().__init__()
        self.facts, self.main_process, self.scope = facts, main_process, scope
        self.classes: list[str] = []

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        value = original_node.value
        site = self.facts.origins.site(value) if isinstance(value, cst.Call) else None
        if site is None or (site.line, site.column) not in self.facts.loggers_built_in_calls:
            return updated_node
        assert isinstance(value, cst.Call)
        self.classes.append(file_logger_class(self.facts, value.func, self.scope) or dotted(value.func) or "")
        built = cst.IfExp(test=self.main_process, body=updated_node.value, orelse=cst.Name("None"))
        return updated_node.with_changes(value=built)


def _first_statement_after_accelerator(statements: Sequence[cst.BaseStatement], acc: str) -> int | None:
    for index, statement in enumerate(statements):
        if binds_name([statement], acc):
            return index + 1
    return None


class _GuardedRuns:
    """The statements of a block as ``_guard_runs`` rebuilds them: consecutive writes of one kind
    gather into a run, and each run goes under one main-process guard (``guard``) when it ends."""

    def __init__(
        self,
        guard: Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]],
        facts: ScriptFacts,
        scope: tuple[str, ...],
    ) -> None:
        self.guard = guard
        self.facts = facts
        #: Where the block is (what its names, ``open`` among them, denote).
        self.scope = scope
        self.result: list[cst.BaseStatement] = []
        self.run: list[cst.BaseStatement] = []
        self.changed = False
        #: The barrier the last guarded run ended with (a statement after it may be a barrier too).
        self.added_barrier: cst.BaseStatement | None = None

    def flush(self) -> None:
        """The run so far, guarded, into the result."""
        if not self.run:
            return
        guarded = self.guard(self.run)
        if self.result and guarded and _is_barrier(self.result[-1], self.facts) and _is_barrier(guarded[0], self.facts):
            # A deletion right after a write: the write's barrier serves both.
            guarded[1] = guarded[1].with_changes(leading_lines=guarded[0].leading_lines)  # type: ignore[attr-defined]
            guarded = guarded[1:]
        self.result.extend(guarded)
        self.added_barrier = guarded[-1] if guarded and _is_barrier(guarded[-1], self.facts) else None
        self.run = []

    def keep(self, statement: cst.BaseStatement) -> None:
        """A statement that writes nothing: it ends the run and stays as it is."""
        self.flush()
        if self.added_barrier is not None and self.result and self.result[-1] is self.added_barrier:
            if _is_barrier(statement, self.facts):
                self.result.pop()  # the barrier already there (before a save) serves the write too
        self.result.append(statement)

    def add_write(self, statement: cst.BaseStatement, kind: str) -> None:
        """A write of ``kind``: it joins the run, which a write of another kind ends first."""
        if self.run and _write_kind(self.run[-1], self.facts, self.scope) != kind:
            self.flush()
        self.run.append(statement)
        self.changed = True

    def add_rewritten(self, statement: cst.BaseStatement) -> None:
        """A statement rewritten (its effect on the main process only, or made safe on every rank): it ends
        the run."""
        self.flush()
        self.result.append(statement)
        self.changed = True


def _write_kind(statement: cst.BaseStatement, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> str | None:
    """``"folder"`` for folder creation, ``"delete"`` for deletions, ``"track"`` for experiment
    tracking, ``"write"`` for other writes, None for anything else; ``scope``: where it stands."""
    if isinstance(statement, cst.With):
        paths = locality_of(facts).per_process_paths
        if paths and any(names_in(item.item) & paths for item in statement.items):
            return None
        if not any(facts.opens_for_writing(item.item, scope) for item in statement.items):
            return None
        # A block the processes run together (an evaluation writing its predictions) cannot go
        # under the main-process guard: :meth:`_MainProcessGuard.leave_With` opens the file on
        # the main process alone instead.
        return None if holds_work_of_every_rank(statement, facts) else "write"
    if isinstance(statement, (cst.If, cst.For, cst.Try)):
        return _compound_write_kind(statement, facts, scope)
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    kinds = {_call_kind(small, facts, scope) for small in statement.body}
    return kinds.pop() if len(kinds) == 1 else None


def _compound_write_kind(
    statement: cst.If | cst.For | cst.Try, facts: ScriptFacts, scope: tuple[str, ...]
) -> str | None:
    """The kind of an ``if``, ``for`` or ``try`` whose whole body is one kind of write (``if not
    os.path.isdir(d): os.makedirs(d)``, ``try: os.makedirs(d) except OSError: pass``, ``for f in
    glob(...): os.remove(f)``, also on one line with its header: ``if args.tensorboard:
    configure("runs/x")``): the guard (and the barrier) go around it, where every rank reaches them.
    None where it has an ``else``/``finally`` or already tests the main process."""
    if getattr(statement, "orelse", None) is not None or getattr(statement, "finalbody", None) is not None:
        return None
    if isinstance(statement, cst.If) and tests_main_process(statement.test, accelerator_name(facts)):
        return None  # already guarded
    body = statement.body
    if isinstance(body, cst.SimpleStatementSuite):
        # On one line: its statements are the body (a ``try`` keeps its handlers below: left).
        return (
            None
            if isinstance(statement, cst.Try)
            else _write_kind(cst.SimpleStatementLine(body=body.body), facts, scope)
        )
    inner = {_write_kind(child, facts, scope) for child in cast(cst.IndentedBlock, body).body}
    return inner.pop() if len(inner) == 1 and None not in inner else None


#: The comma before an argument added after the others.
_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
#: Tests of whether a path exists (as a folder, or as anything).
_EXISTENCE_TESTS = frozenset({"os.path.exists", "os.path.isdir", "os.path.lexists"})


def _folder_creation(statement: cst.BaseStatement, facts: ScriptFacts, scope: tuple[str, ...]) -> cst.Call | None:
    """The call of a statement ``os.makedirs(path)`` (one positional argument, no ``exist_ok``)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return None
    call = small.value
    if facts.callee_name(call.func, scope) != "os.makedirs" or len(call.args) != 1:
        return None
    return call if call.args[0].keyword is None and not call.args[0].star else None


def _with_exist_ok(call: cst.Call) -> cst.Call:
    """``os.makedirs(d)`` → ``os.makedirs(d, exist_ok=True)``."""
    exist_ok = cst.Arg(cst.Name("True"), keyword=cst.Name("exist_ok"), equal=TIGHT_EQUAL)
    return call.with_changes(args=[*call.args[:-1], call.args[-1].with_changes(comma=_COMMA), exist_ok])


def _tests_missing(
    test: cst.BaseExpression, path: cst.BaseExpression, facts: ScriptFacts, scope: tuple[str, ...]
) -> bool:
    """Whether ``test`` holds only where ``path`` does not exist: ``not os.path.exists(path)``
    (``isdir``), alone or as a part of an ``and``."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_missing(test.left, path, facts, scope) or _tests_missing(test.right, path, facts, scope)
    if not isinstance(test, cst.UnaryOperation) or not isinstance(test.operator, cst.Not):
        return False
    tested = test.expression
    return (
        isinstance(tested, cst.Call)
        and facts.callee_name(tested.func, scope) in _EXISTENCE_TESTS
        and len(tested.args) == 1
        and tested.args[0].value.deep_equals(path)
    )


def _assigned_names(assign: cst.Assign) -> set[str]:
    return {name for target in assign.targets if (name := dotted(target.target)) is not None}


class _TrackerReads(cst.CSTVisitor):
    """Trackers whose attributes are read outside a call of one of their methods: ``writer.log_dir``
    (not ``writer.add_scalar(...)``, nor ``writer.log_dir`` inside such a call), and ``wandb`` when
    its run state is read (``config = wandb.config``, not ``wandb.config.update(...)``)."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts = facts
        #: Tracker → the first of its attributes read.
        self.read: dict[str, str] = {}
        self._in_logging_call = 0

    def _logging_call(self, node: cst.Call) -> bool:
        if isinstance(node.func, cst.Attribute) and dotted(node.func.value) in self.facts.trackers:
            return True
        return self.facts.callee_name(node.func) in TRACKER_FUNCTIONS

    def visit_Call(self, node: cst.Call) -> bool:
        if self._logging_call(node):
            self._in_logging_call += 1
        return True

    def leave_Call(self, original_node: cst.Call) -> None:
        if self._logging_call(original_node):
            self._in_logging_call -= 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if self._in_logging_call:
            return True
        owner = dotted(node.value)
        if owner is not None and owner in self.facts.trackers:
            self.read.setdefault(owner, node.attr.value)
        elif self.facts.qualified_name(node) in TRACKER_RUN_STATE:
            self.read.setdefault("wandb", self.facts.qualified_name(node) or "")
        return True


def _trackers_read(module: cst.Module, facts: ScriptFacts) -> Mapping[str, str]:
    """Trackers of ``facts`` whose attributes the module reads outside their logging calls, with
    the first attribute read; ``wandb`` when its run state is (see :class:`_TrackerReads`)."""
    if not facts.trackers and not facts.lines_mentioning(("wandb",)):
        return {}
    visitor = _TrackerReads(facts)
    walk(module, visitor)
    return visitor.read


def _tracker_creation(statement: cst.BaseStatement, facts: ScriptFacts, scope: tuple[str, ...] = ()) -> cst.Call | None:
    """The call of ``writer = SummaryWriter(...)`` / ``run = wandb.init(...)`` / ``log =
    CSVLogger(...)`` (a logger keeping its file open, see ``file_flow.file_loggers``), else None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        return None
    func = assign.value.func
    if facts.callee_name(func) in TRACKER_CONSTRUCTORS or file_logger_class(facts, func, scope) is not None:
        return assign.value
    return None


def _fetches(statement: cst.BaseStatement, facts: ScriptFacts, scope: tuple[str, ...]) -> bool:
    """Whether a writing statement fetches what it writes over the network itself
    (``f.write(requests.get(url).text)``, ``urlopen(url)`` among its ``with`` items, a call of the
    script's own download function), so that a failed fetch raises inside the write."""
    return any(
        facts.callee_name(call.func, scope) in NETWORK_FETCHES
        or (isinstance(call.func, cst.Name) and call.func.value in facts.download_functions)
        for call in calls_in(statement)
    )


def _call_kind(small: cst.BaseSmallStatement, facts: ScriptFacts, scope: tuple[str, ...]) -> str | None:
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return None
    call = small.value
    name = facts.callee_name(call.func)
    if name in TRACKER_FUNCTIONS or (
        isinstance(call.func, cst.Attribute) and dotted(call.func.value) in facts.trackers
    ):
        return "track"
    paths = locality_of(facts).per_process_paths
    if paths and names_in(call) & paths:
        return None  # a folder or file of this process alone: every rank handles its own
    if name in FOLDER_FUNCTIONS:
        return "folder"
    if name in DELETING_FUNCTIONS:
        return "delete"
    if name in FILE_FETCHES and scope and scope[0] in facts.download_functions:
        return None  # the script's own download: its callers run it on the main process first
    return "write" if _writes_a_file(call, name, facts, scope) else None


def _writes_a_file(call: cst.Call, name: str | None, facts: ScriptFacts, scope: tuple[str, ...]) -> bool:
    """A call writing a file: a writing function or method (``torch.save``, ``fig.savefig``), one
    handed a file opened for writing (``json.dump(results, open("results.json", "w"))``), or a
    file opened, written and dropped (``open("config.txt", "w").write(text)``)."""
    if name in WRITING_FUNCTIONS:
        return True
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    if method in WRITING_METHODS:
        return True
    if any(facts.opens_for_writing(arg.value, scope) for arg in call.args):
        return True
    return method in ("write", "writelines") and facts.opens_for_writing(cast(cst.Attribute, call.func).value, scope)


#: The report of a file opened for writing and kept open (a logger's ``self.file``) where no
#: accelerator is: guarding the ``open`` alone would leave the other ranks without the file
#: object their later writes use, so the fix is the author's.
KEPT_FILE_UNREACHABLE = (
    "file opened for writing and kept (a logger's file) where the accelerator is not reachable: every rank "
    "opens it and writes its rows into it, one rank's over another's; create the object on the main process "
    "only (logger = Logger(...) if accelerator.is_main_process else None) and call it there"
)


#: The report of a file opened for writing into a name (``log = open(path, "a")``, not a logger
#: class's) where no accelerator is.
KEPT_HANDLE_UNREACHABLE = (
    "file opened for writing and kept where the accelerator is not reachable: every rank opens it and writes its "
    "lines into it, one rank's over or after another's; open it where the accelerator is, on the main process only "
    "(open(path if accelerator.is_main_process else os.devnull, ...))"
)


#: ``open``'s parameters after the mode that ``tempfile.TemporaryFile`` takes too, in ``open``'s order.
_SCRATCH_PARAMETERS = ("buffering", "encoding", "errors", "newline")


def _scratch_file(call: cst.Call, mode: str) -> cst.Call:
    """``tempfile.TemporaryFile(mode, ...)`` for ``open(path, mode, ...)``: a file of this process
    alone, opened as ``call`` opens its file (its buffering, encoding, errors and newline, by
    keyword; the rest, ``closefd``, ``opener``, concern the real file only)."""
    args: list[cst.Arg] = [cst.Arg(cst.SimpleString(f'"{mode}"'))]
    for index, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword is None and 2 <= index < 2 + len(_SCRATCH_PARAMETERS):
            keyword = _SCRATCH_PARAMETERS[index - 2]
        if keyword in _SCRATCH_PARAMETERS:
            args.append(cst.Arg(arg.value, keyword=cst.Name(keyword), equal=TIGHT_EQUAL))
    return cst.Call(cst.Attribute(cst.Name("tempfile"), cst.Name("TemporaryFile")), args)


def _mode_literal(literal: cst.BaseExpression, mode: str) -> cst.SimpleString:
    """``mode`` written as the string literal ``literal`` is (its prefix and quotes)."""
    assert isinstance(literal, cst.SimpleString)
    return cst.SimpleString(f"{literal.prefix}{literal.quote}{mode}{literal.quote}")


def _keeps_file_open_for_writing(statement: cst.BaseStatement, facts: ScriptFacts, scope: tuple[str, ...]) -> bool:
    """``self.file = open(path, "w")``: a file opened for writing (``"w"``/``"a"``/``"x"``) and
    bound to a name, written through it later (``csv.writer(self.file).writerow(row)``)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Assign) and facts.opens_for_writing(small.value, scope) for small in statement.body
    )


def _is_barrier(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    """``accelerator.wait_for_everyone()`` on a line of its own."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and is_accelerator_method(statement.body[0].value, facts, "wait_for_everyone")
    )
