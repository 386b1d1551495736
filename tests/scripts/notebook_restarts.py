"""notebook_launcher's elastic options in real forked launches (tests/test_notebook_launcher.py).

``notebook_restarts.py OUT_DIR PORT OTHER_PORT``: launches ``train`` on 2 forked CPU workers
whose rank 1 fails on the first attempt; with ``max_restarts=1`` the second attempt completes,
with ``max_restarts=0`` the launch raises. Each worker writes ``attempt<k>_rank<r>`` into
OUT_DIR; what the launches raise is printed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from accel_convert.runtime import notebook_launcher


def train(out: str) -> None:
    from accel_convert.runtime import Accelerator

    accelerator = Accelerator()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"attempt {attempt} of rank {accelerator.process_index}, world {accelerator.num_processes}")
    (Path(out) / f"attempt{attempt}_rank{accelerator.process_index}").write_text(os.environ["MASTER_PORT"])
    accelerator.wait_for_everyone()  # both files are written before rank 1 fails
    if attempt == 0 and accelerator.process_index == 1:
        raise ValueError("rank 1 fails its first attempt on purpose")


if __name__ == "__main__":
    out_dir, port, other_port = sys.argv[1:4]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    notebook_launcher(
        train,
        args=(out_dir,),
        num_processes=2,
        rdzv_endpoint=f"127.0.0.1:{port}",  # the address the workers meet at
        rdzv_backend="c10d",  # accepted, no effect: forked workers meet statically
        rdzv_id="restarts",
        max_restarts=1,
        monitor_interval=0.05,
        log_line_prefix_template="[${rank}]: ",
    )
    print("restarted launch completed")
    sys.stdout.flush()
    no_restart = Path(out_dir) / "no_restart"
    no_restart.mkdir()
    try:
        notebook_launcher(train, args=(str(no_restart),), num_processes=2, use_port=other_port)
    except RuntimeError as error:
        print("launch without restarts raised:", "rank 1 fails its first attempt on purpose" in str(error))
