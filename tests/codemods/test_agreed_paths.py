"""agreed-paths (ACC128): names of run folders each process would decide for itself — from the
clock, a fresh id, its process id or a folder listing — are rank 0's on every process, wherever
they are bound (module, function, method); timers and what only some ranks reach stay."""

from __future__ import annotations

import textwrap

from tests.codemods.support import converted_stably

HEADER = """\
import glob
import os
import time
import uuid
from datetime import datetime

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model
"""


def converted(body: str) -> tuple[list[str], list[str]]:
    """``body`` below :data:`HEADER`, converted (and stable): its stripped lines and the codes reported."""
    code, codes = converted_stably(HEADER + textwrap.dedent(body))
    return [line.strip() for line in code.splitlines()], codes


def test_a_folder_numbered_from_a_listing_in_a_method_is_agreed_where_it_is_listed() -> None:
    lines, codes = converted(
        """

        class Saver:
            def __init__(self, directory):
                self.runs = sorted(glob.glob(os.path.join(directory, "experiment_*")))
                run_id = int(self.runs[-1].split("_")[-1]) + 1 if self.runs else 0
                self.experiment_dir = os.path.join(directory, "experiment_{}".format(run_id))

            def save(self, state):
                torch.save(state, os.path.join(self.experiment_dir, "checkpoint.pt"))


        def main():
            saver = Saver("run")
            saver.save(train().state_dict())
        """
    )
    listing = lines.index('self.runs = sorted(glob.glob(os.path.join(directory, "experiment_*")))')
    # Right after the listing, before the number is taken from it.
    assert lines[listing + 1] == "self.runs = broadcast_object_list([self.runs])[0]"
    assert "from accel_convert.runtime.utils import broadcast_object_list" in lines
    assert "ACC128" in codes


def test_a_stamp_at_module_level_read_by_a_function_is_agreed_where_it_is_made() -> None:
    lines, codes = converted(
        """
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_dir = "logs/" + stamp


        def main():
            model = train()
            torch.save(model.state_dict(), log_dir + "/model.pt")
        """
    )
    made = lines.index('stamp = time.strftime("%Y%m%d-%H%M%S")')
    assert lines[made + 1] == "stamp = broadcast_object_list([stamp])[0]"
    assert codes.count("ACC128") == 1  # log_dir follows from the agreed stamp


def test_a_fresh_id_in_a_function_is_agreed_before_the_folder_is_made() -> None:
    lines, _ = converted(
        """
        def main():
            run = uuid.uuid4().hex[:8]
            os.makedirs(f"runs/{run}", exist_ok=True)
            torch.save(train().state_dict(), f"runs/{run}/last.pt")
        """
    )
    assert lines[lines.index("run = uuid.uuid4().hex[:8]") + 1] == "run = broadcast_object_list([run])[0]"


def test_timers_and_stamps_no_path_reads_are_left_alone() -> None:
    lines, codes = converted(
        """
        def main():
            start = time.time()
            today = datetime.now().strftime("%Y-%m-%d")
            train()
            print(f"{today}: took {time.time() - start:.1f}s")
        """
    )
    assert not any("broadcast_object_list" in line for line in lines)
    assert "ACC128" not in codes


def test_a_name_only_the_main_process_makes_is_not_agreed() -> None:
    # A broadcast there would wait for the processes that never reach it.
    lines, codes = converted(
        """
        def main():
            model = train()
            if int(os.environ.get("RANK", "0")) == 0:
                out = os.path.join("out", uuid.uuid4().hex)
                torch.save(model.state_dict(), out)
        """
    )
    assert not any("broadcast_object_list" in line for line in lines)
    assert "ACC128" not in codes


def test_a_stamp_in_a_file_logger_or_a_dataset_is_not_agreed() -> None:
    # The logger is built on the main process alone, the dataset's items in loader workers: a
    # broadcast in either would wait for processes that never come.
    lines, codes = converted(
        """

        class CSVLogger:
            def __init__(self):
                self.path = f"logs/{time.strftime('%H%M%S')}.csv"
                self.file = open(self.path, "w")

            def write(self, row):
                self.file.write(row)


        class Noisy(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, index):
                name = f"samples/{uuid.uuid4().hex}.pt"
                torch.save(torch.randn(4), name)
                return torch.load(name)


        def main():
            log = CSVLogger()
            train()
            log.write("done")
        """
    )
    assert not any("broadcast_object_list" in line for line in lines)
    assert "ACC128" not in codes


def test_a_folder_counted_past_in_a_helper_is_agreed_after_the_count() -> None:
    # YOLO's increment_path: the main process may make runs/exp2 before another counts, which
    # would then go on to runs/exp3. The count is agreed after the loop, never inside it.
    lines, codes = converted(
        """
        def increment_path(path):
            n = 0
            while os.path.exists(f"{path}{n}"):
                n += 1
            return f"{path}{n}"


        def main():
            save_dir = increment_path("runs/exp")
            os.makedirs(save_dir, exist_ok=True)
            torch.save(train().state_dict(), os.path.join(save_dir, "last.pt"))
        """
    )
    counted = lines.index("n += 1")
    assert lines[counted + 1] == "n = broadcast_object_list([n])[0]"
    assert lines[counted + 2] == 'return f"{path}{n}"'
    assert codes.count("ACC128") == 1
