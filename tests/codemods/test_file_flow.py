"""The file-flow provider: which main-only writes a later read on every rank may open (the
checkpoint rule waits after those)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accel_convert.codemods.engine.analysis import analyse
from accel_convert.codemods.model.file_flow import file_flow


def _reads_after(source: str) -> dict[int, set[tuple[str, int]]]:
    """Write line → the reads (function, line) that may open what it wrote."""
    source = textwrap.dedent(source).lstrip()
    flow = analyse(cst.parse_module(source), source).of(file_flow)
    found: dict[int, set[tuple[str, int]]] = {}
    for write, function, line in flow.pairs:
        found.setdefault(write, set()).add((function, line))
    return found


def test_a_read_in_a_function_the_caller_runs_after_the_saving_one_pairs_with_the_save() -> None:
    # MorvanZhou's 304_save_reload: save() then restore() at the top level, nothing passed on.
    found = _reads_after(
        """
        import torch

        def save(net):
            torch.save(net, "net.pkl")
            torch.save(net.state_dict(), "net_params.pkl")

        def restore():
            return torch.load("net.pkl")

        def restore_params():
            return torch.load("net_params.pkl")

        def main(net):
            save(net)
            restore()
            restore_params()

        main(torch.nn.Linear(1, 1))
        """
    )
    assert found == {4: {("restore", 8)}, 5: {("restore_params", 11)}}


def test_a_read_that_runs_before_the_save_or_opens_another_file_does_not_pair() -> None:
    found = _reads_after(
        """
        import torch

        def load(path):
            return torch.load(path)

        def run(net, out):
            net = load("pretrained.pt")
            torch.save(net.state_dict(), f"{out}/epoch_{3}.pt")
            torch.save(net.state_dict(), f"{out}/optimizer.pt")
            best = f"{out}/epoch_{1}.pt"
            return torch.load(best), torch.load("other.pt")
        """
    )
    # The f-string read pairs with the epoch file (same name pattern), not the optimizer's; the
    # earlier load (run before the saves) and "other.pt" pair with nothing.
    assert found == {8: {("run", 11)}}


def test_a_read_of_an_unknown_path_pairs_with_every_earlier_save() -> None:
    found = _reads_after(
        """
        import torch

        class Trainer:
            def fit(self, net):
                torch.save(net.state_dict(), self.path)

        def score(path):
            return torch.load(path)

        def main(net, path):
            trainer = Trainer()
            trainer.fit(net)
            score(path)
        """
    )
    assert found == {5: {("score", 8)}}
