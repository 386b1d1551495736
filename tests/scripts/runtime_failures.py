"""One rank fails; every rank must stop within seconds. Launched by tests/test_runtime_failures.py.

``runtime_failures.py MODE OUT_DIR``. MODE is where the fault happens:

- ``raise_before`` / ``raise_during`` / ``raise_after``: rank 1 raises a ValueError before the
  first epoch, at the fourth batch of the first epoch, or after it (rank 0 is then already in the
  next epoch's start-of-epoch broadcast);
- ``corrupt_rng``: a checkpoint is saved, one byte of ``random_states_1.pkl`` is flipped, and
  every rank loads it;
- ``forged_rng``: as above, but ``random_states_1.pkl`` is replaced by a pickle that runs code
  when unpickled, and the manifest is rewritten to vouch for it: only rank 1 reads that file;
- ``kill_during``: rank 1 kills itself with SIGKILL at the fourth batch;
- ``kill_during_save``: a first checkpoint is saved (automatic naming), then rank 1 kills itself
  with SIGKILL in the middle of the second ``save_state``, while writing its own file;
- ``kill_mid_overwrite``: a checkpoint holding ``first`` is saved to OUT_DIR/ckpt, then one
  holding ``second`` over it, and rank 0 kills itself with SIGKILL between the save's two
  renames (the old folder moved aside, the new one not yet in place);
- ``resume_overwritten``: (no fault) every rank loads OUT_DIR/ckpt and prints what it holds,
  then saves ``third`` over it; rank 0 prints what OUT_DIR holds then.

Just before the fault, the faulting rank writes the time to OUT_DIR/fault_time.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_convert.runtime import Accelerator

MODE, OUT = sys.argv[1], Path(sys.argv[2])


def mark_fault() -> None:
    (OUT / "fault_time").write_text(repr(time.time()))


class Progress:
    """A registered object whose value tells which save a checkpoint came from."""

    def __init__(self, value: str) -> None:
        self.value = value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


class Payload:
    """Unpickling this writes a marker file: it must never happen."""

    def __reduce__(self) -> tuple:
        return (Path.write_text, (OUT / "payload_ran", "yes"))


def main() -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if MODE == "kill_during_save":
        from accel_convert.runtime import ProjectConfiguration

        accelerator.project_configuration = ProjectConfiguration(
            project_dir=str(OUT / "project"), automatic_checkpoint_naming=True
        )
        accelerator.save_state()  # checkpoint_0: complete
        if rank == 1:
            import accel_convert.runtime.checkpoint as checkpoint_module

            write = checkpoint_module._write

            def write_then_die(path: Path, content: object) -> None:
                write(path, content)
                mark_fault()
                os.kill(os.getpid(), signal.SIGKILL)

            checkpoint_module._write = write_then_die
        accelerator.save_state()  # checkpoint_1: rank 1 dies half way
    if MODE == "kill_mid_overwrite":
        progress = Progress("first")
        accelerator.register_for_checkpointing(progress)
        accelerator.save_state(str(OUT / "ckpt"))
        progress.value = "second"
        if rank == 0:
            import accel_convert.runtime.checkpoint as checkpoint_module

            rename = checkpoint_module._rename

            def rename_then_die(source: Path, destination: Path) -> None:
                rename(source, destination)
                if destination.name == ".ckpt.replaced":
                    mark_fault()
                    os.kill(os.getpid(), signal.SIGKILL)

            checkpoint_module._rename = rename_then_die
        accelerator.save_state(str(OUT / "ckpt"))
    if MODE == "resume_overwritten":
        progress = Progress("nothing loaded")
        accelerator.register_for_checkpointing(progress)
        accelerator.load_state(str(OUT / "ckpt"))
        print(f"rank {rank}: loaded {progress.value}", flush=True)
        progress.value = "third"
        accelerator.save_state(str(OUT / "ckpt"))
        if rank == 0:
            print(f"left: {sorted(path.name for path in OUT.iterdir() if path.name != 'fault_time')}", flush=True)
        accelerator.end_training()
        return
    if MODE in ("corrupt_rng", "forged_rng"):
        checkpoint = OUT / "checkpoint"
        accelerator.save_state(str(checkpoint))
        if rank == 0:
            target = checkpoint / "random_states_1.pkl"
            if MODE == "corrupt_rng":
                data = bytearray(target.read_bytes())
                data[len(data) // 2] ^= 0x01
                target.write_bytes(bytes(data))
            else:
                target.write_bytes(pickle.dumps(Payload()))
                manifest = json.loads((checkpoint / "checkpoint.json").read_text())
                manifest["files"][target.name] = {
                    "bytes": target.stat().st_size,
                    "sha256": hashlib.sha256(target.read_bytes()).hexdigest(),
                }
                (checkpoint / "checkpoint.json").write_text(json.dumps(manifest))
            mark_fault()
        accelerator.wait_for_everyone()
        accelerator.load_state(str(checkpoint))
        print(f"rank {rank}: loaded", flush=True)
    for _epoch in range(3):
        if MODE == "raise_before" and rank == 1:
            mark_fault()
            raise ValueError("deliberate failure before the epoch")
        for step, (inputs, targets) in enumerate(loader):
            if step == 3 and rank == 1 and MODE in ("raise_during", "kill_during"):
                mark_fault()
                if MODE == "kill_during":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise ValueError("deliberate failure during the epoch")
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if MODE == "raise_after" and rank == 1:
            mark_fault()
            raise ValueError("deliberate failure after the epoch")
    accelerator.end_training()


if __name__ == "__main__":
    main()
