"""side-effects (ACC116): file writes run on the main process only."""

from __future__ import annotations

import pytest

from accel_convert.codemods.rules.side_effects import SideEffectsCodemod
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
