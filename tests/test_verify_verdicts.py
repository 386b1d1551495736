"""The verdicts of ``accel-convert verify`` on hand-made records: each defect is named, a right run passes."""

from __future__ import annotations

from typing import Any

from accel_convert.converter.verify_verdicts import (
    RunTrace,
    Verdict,
    attach_findings,
    explain_unreached_cadence,
    mask_numbers,
    mask_timing,
    n_process_verdicts,
    one_process_verdicts,
    unreached_cadence,
)


def rec(kind: str, rank: int = 0, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "rank": rank, "t": 0.0, **fields}


def rank_records(rank: int, world: int, *, steps: int = 2, digest: str = "d", prints: tuple[str, ...] = ()) -> list:
    records = [rec("start", rank, pid=100 + rank, argv=["train.py"], cwd=".", world_size=world, local_rank=rank)]
    for index in range(steps):
        records.append(rec("loss", rank, index=index, value=1.0 / (index + 1)))
        records.append(rec("step", rank, index=index, digest=f"{digest}{index}", norm=3.0))
    records += [rec("print", rank, text=text) for text in prints]
    records.append(rec("exit", rank, code=0, exception=None, site=None))
    return records


def original_run(**extra: Any) -> RunTrace:
    records = rank_records(0, 1, prints=("epoch 0 loss 0.51", "done"))
    records.append(
        rec("pass", 0, loader="train.py:9", grad=False, samples=100, gathered=None, gather_inputs=[], complete=True)
    )
    records.append(rec("write", 0, path="model.pt", size=10, sha256="aa", via="torch.save"))
    return RunTrace("original", {0: records}, files={"model.pt": "aa"}, **extra)


def right_multi() -> RunTrace:
    ranks = {}
    for rank in (0, 1):
        records = rank_records(rank, 2, prints=("epoch 0 loss 0.49", "done") if rank == 0 else ())
        records.append(
            rec(
                "pass",
                rank,
                loader="conv.py:12",
                grad=False,
                samples=50,
                gathered=100,
                gather_inputs=["Tensor"],
                complete=True,
            )
        )
        if rank == 0:
            records.append(rec("write", 0, path="model.pt", size=10, sha256="bb", via="torch.save"))
        ranks[rank] = records
    return RunTrace("converted on 2", ranks, files={"model.pt": "bb"})


def by_key(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {item.key: item for item in verdicts}


def failed(verdicts: list[Verdict]) -> set[str]:
    return {item.key for item in verdicts if not item.holds}


def test_a_right_conversion_holds_everywhere() -> None:
    original = original_run()
    converted = RunTrace("converted", {0: original.records[0]}, files=dict(original.files))
    assert failed(one_process_verdicts(original, converted)) == set()
    assert failed(n_process_verdicts(original, right_multi(), 2)) == set()


def test_one_process_differences_are_named() -> None:
    original = original_run()
    records = rank_records(0, 1, digest="x", prints=("epoch 0 loss 0.52", "done"))
    records[1] = rec("loss", 0, index=0, value=2.0)
    converted = RunTrace("converted", {0: records}, files={"model.pt": "cc", "extra.txt": "dd"})
    verdicts = by_key(one_process_verdicts(original, converted))
    assert not verdicts["losses"].holds and "loss 0" in verdicts["losses"].evidence[0]
    assert not verdicts["stdout"].holds and "0.52" in verdicts["stdout"].evidence[0]
    assert not verdicts["parameters"].holds
    assert not verdicts["files"].holds
    assert any("extra.txt" in line for line in verdicts["files"].evidence)
    assert verdicts["runs"].holds


def test_timing_lines_are_masked_but_losses_are_not() -> None:
    assert mask_timing("epoch 1 took 3.25s, 12.5 it/s at 2024-01-02 10:11:12") == mask_timing(
        "epoch 1 took 4.00s, 9.1 it/s at 2025-03-04 01:02:03"
    )
    assert mask_timing("loss 0.25") != mask_timing("loss 0.26")
    assert mask_timing("| ms/batch  5.67 | loss 2.1") == mask_timing("| ms/batch 12.34 | loss 2.1")
    assert mask_numbers("step 3 loss 0.25") == mask_numbers("step 4 loss 1e-3")
    assert mask_numbers("| ppl    77.76 |") == mask_numbers("| ppl   128.40 |")
    # a model's output printed on N processes: DDP's own autograd function made it
    assert mask_numbers("[-1.1, -1.0]], grad_fn=<_DDPSinkBackward>)") == mask_numbers(
        "[-1.1, -1.0]], grad_fn=<LogSoftmaxBackward0>)"
    )
    assert mask_timing("| 10 batches | ms/batch 16.57 | loss 4.35") == mask_timing(
        "| 10 batches | ms/batch 176.46 | loss 4.35"
    )


def test_a_temporary_file_renamed_into_place_is_not_an_output() -> None:
    """An atomic save writes a temporary file, then renames it: the folder holds the final name."""
    multi = right_multi()
    multi.records[0].append(rec("write", 0, path=".tmp-x1/model.pt", size=10, sha256="bb", via="torch.save"))
    assert by_key(n_process_verdicts(original_run(), multi, 2))["files-once"].holds


def test_a_crash_names_the_exception_and_site() -> None:
    multi = right_multi()
    multi.records[1][-1] = rec("exit", 1, code=1, exception="FileNotFoundError: model.pt", site="conv.py:20")
    multi.records[1].insert(1, rec("read", 1, path="model.pt", exists=False, size=None, sha256=None, via="torch.load"))
    multi.returncode = 1
    verdicts = by_key(n_process_verdicts(original_run(), multi, 2))
    assert not verdicts["no-crash"].holds and "FileNotFoundError" in verdicts["no-crash"].evidence[0]
    assert verdicts["no-crash"].site == "conv.py:20"
    assert not verdicts["reads-complete"].holds and "model.pt" in verdicts["reads-complete"].evidence[0]


def test_a_read_of_a_partial_write_is_named() -> None:
    multi = right_multi()
    multi.records[1].insert(1, rec("read", 1, path="model.pt", exists=True, size=3, sha256="partial", via="open"))
    verdicts = by_key(n_process_verdicts(original_run(), multi, 2))
    assert (
        not verdicts["reads-complete"].holds
        and "before its write was complete" in verdicts["reads-complete"].evidence[0]
    )


def test_half_the_files_written_is_named() -> None:
    original = original_run()
    original.files.update({f"out/{i}.png": "x" for i in range(4)})
    multi = right_multi()
    multi.files.update({f"out/{i}.png": "x" for i in range(2)})
    verdict = by_key(n_process_verdicts(original, multi, 2))["files-once"]
    assert not verdict.holds and "3 of the original's 5 files" in verdict.evidence[0]


def sampled_during_training(steps: int, every: int, rank: int, world: int) -> list:
    """A GAN's loop: an optimizer step per batch, an image after every ``every`` steps, and a
    model saved after training."""
    records = [rec("start", rank, pid=1, argv=["gan.py"], cwd=".", world_size=world, local_rank=rank)]
    for index in range(steps):
        records.append(rec("step", rank, index=index, digest=f"d{index}", norm=1.0))
        if index % every == 0 and rank == 0:
            records.append(rec("write", 0, path=f"images/{index}.png", size=5, sha256=f"i{index}", via="open"))
    if rank == 0:
        records.append(rec("write", 0, path="model.pt", size=5, sha256="m", via="torch.save"))
    return records + [rec("exit", rank, code=0, exception=None, site=None)]


def gan_runs(multi_steps: int) -> tuple[RunTrace, RunTrace]:
    original = RunTrace("original", {0: sampled_during_training(8, 4, 0, 1)})
    original.files = {"images/0.png": "x", "images/4.png": "x", "model.pt": "m"}
    multi = RunTrace("converted on 2", {rank: sampled_during_training(multi_steps, 4, rank, 2) for rank in (0, 1)})
    multi.files = {"images/0.png": "x", "model.pt": "m"}
    return original, multi


def test_files_of_a_step_cadence_the_n_process_run_never_reaches_are_not_missing() -> None:
    """Each step takes a batch on every process: 4 steps instead of 8, so the image after step 4 is
    never due (the tutorials' GANs: ``if batches_done % sample_interval == 0``)."""
    original, multi = gan_runs(4)
    verdict = by_key(n_process_verdicts(original, multi, 2))["files-once"]
    assert verdict.holds and "images/4.png" in verdict.evidence[0]
    # a run that took the steps and still did not write the image: missing
    original, multi = gan_runs(8)
    verdict = by_key(n_process_verdicts(original, multi, 2))["files-once"]
    assert not verdict.holds and "missing: ['images/4.png']" in verdict.evidence[0]
    # a file written after training is due however few steps were taken
    original, multi = gan_runs(4)
    del multi.files["model.pt"]
    verdict = by_key(n_process_verdicts(original, multi, 2))["files-once"]
    assert not verdict.holds and "missing: ['model.pt']" in verdict.evidence[0]


def test_a_file_written_by_every_rank_is_named() -> None:
    multi = right_multi()
    multi.records[1].append(rec("write", 1, path="model.pt", size=10, sha256="bb", via="torch.save"))
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["files-once"]
    assert not verdict.holds and "written by ranks 0, 1" in verdict.evidence[0]


def test_an_evaluation_on_one_share_is_named() -> None:
    multi = right_multi()
    for rank in (0, 1):
        passes = multi.of("pass", rank)
        passes[0]["gathered"], passes[0]["gather_inputs"] = None, []
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["evaluation-counts"]
    assert not verdict.holds and "counts 50 samples (its own share" in verdict.evidence[0]


def test_an_evaluation_whose_ranks_split_the_batches_counts_them_together() -> None:
    # join_uneven_inputs(..., even_batches=False): each process writes its own batches' files and
    # gathers nothing; together the ranks count what one process counts (100 = 52 + 48).
    multi = right_multi()
    for rank, samples in ((0, 52), (1, 48)):
        passes = multi.of("pass", rank)
        passes[0].update(gathered=None, gather_inputs=[], samples=samples, uneven=True)
    assert by_key(n_process_verdicts(original_run(), multi, 2))["evaluation-counts"].holds
    multi.of("pass", 1)[0]["samples"] = 40  # a batch lost
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["evaluation-counts"]
    assert not verdict.holds and "the ranks count 92 samples together" in verdict.evidence[0]


def test_lines_the_ranks_share_out_are_printed_once() -> None:
    # Each process prints the lines of its own batches: together, the original's very lines.
    original = original_run()
    original.records[0] += [rec("print", 0, text=f"saved {i}.png") for i in range(4)]
    multi = right_multi()
    multi.records[0] += [rec("print", 0, text=f"saved {i}.png") for i in (0, 2)]
    multi.records[1] += [rec("print", 1, text=f"saved {i}.png") for i in (1, 3)]
    assert by_key(n_process_verdicts(original, multi, 2))["prints-once"].holds
    multi.records[1][-1]["text"] = "saved 2.png"  # one line twice, one lost
    verdict = by_key(n_process_verdicts(original, multi, 2))["prints-once"]
    assert not verdict.holds and "printed by ranks 0, 1" in verdict.evidence[0]


def test_a_gather_of_a_python_int_is_named() -> None:
    multi = right_multi()
    multi.of("pass", 0)[0]["gather_inputs"] = ["Tensor", "int"]
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["evaluation-counts"]
    assert not verdict.holds and "a gather of a Python int" in verdict.evidence[0]


def test_drifting_parameters_are_named_at_the_first_step() -> None:
    multi = right_multi()
    for record in multi.of("step", 1):
        record["digest"] = "other"
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["in-sync"]
    assert not verdict.holds and "after step 0" in verdict.evidence[0]


def test_a_print_on_every_rank_is_named() -> None:
    multi = right_multi()
    multi.records[1].append(rec("print", 1, text="epoch 0 loss 0.47"))
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["prints-once"]
    assert not verdict.holds and "printed by ranks 0, 1" in verdict.evidence[0]


def test_a_line_printed_by_no_rank_is_named() -> None:
    multi = right_multi()
    multi.records[0] = [record for record in multi.records[0] if record.get("text") != "done"]
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["prints-once"]
    assert not verdict.holds and "'done': printed by the original, by no rank" in verdict.evidence


def test_the_main_process_printing_its_own_device_index_prints_the_originals_line() -> None:
    """The original prints ``Using cuda device``; rank 0 of the converted run ``Using cuda:0``."""
    original = original_run()
    original.records[0].append(rec("print", 0, text="Using cuda device"))
    multi = right_multi()
    multi.records[0].append(rec("print", 0, text="Using cuda:0 device"))
    assert by_key(n_process_verdicts(original, multi, 2))["prints-once"].holds
    multi.records[1].append(rec("print", 1, text="Using cuda:1 device"))
    verdict = by_key(n_process_verdicts(original, multi, 2))["prints-once"]
    assert not verdict.holds and "printed by ranks 0, 1" in verdict.evidence[0]


def test_a_device_of_another_rank_is_named() -> None:
    multi = right_multi()
    multi.records[1].append(rec("device", 1, what="module", requested="cuda:0", site="conv.py:7"))
    multi.records[0].append(rec("device", 0, what="module", requested="cuda:0", site="conv.py:7"))
    verdict = by_key(n_process_verdicts(original_run(), multi, 2))["own-device"]
    assert not verdict.holds and len(verdict.evidence) == 1 and "rank 1 (local rank 1)" in verdict.evidence[0]
    assert verdict.site == "conv.py:7"


def test_a_hang_shows_each_ranks_stack() -> None:
    multi = right_multi()
    multi.timed_out = True
    multi.stacks = {
        0: 'Thread 0x9 (most recent call first):\n  File "/py/lib/python3.11/threading.py", line 3 in wait\n\n'
        "Current thread 0x1 (most recent call first):\n"
        '  File "/x/site-packages/torch/distributed/c10d.py", line 9 in all_reduce\n'
        '  File "/x/site-packages/torch/nn/module.py", line 5 in forward\n'
        '  File "/w/conv.py", line 31 in main\n',
        1: 'Thread 0x2 (most recent call first):\n  File "/w/conv.py", line 40 in <module>\n',
    }
    verdicts = by_key(n_process_verdicts(original_run(), multi, 2))
    hang = verdicts["no-hang"]
    assert not hang.holds and hang.site == "/w/conv.py:31"
    assert any(line.startswith("rank 1 stack") for line in hang.evidence)
    rank_0 = next(line for line in hang.evidence if line.startswith("rank 0 stack")).splitlines()[1:]
    assert rank_0 == [
        'File "/x/site-packages/torch/distributed/c10d.py", line 9 in all_reduce',
        'File "/w/conv.py", line 31 in main',
    ]
    assert verdicts["no-crash"].holds  # a stopped run is a hang, not also a crash


def test_findings_are_attached_to_the_verdict_they_explain() -> None:
    multi = right_multi()
    multi.timed_out = True
    verdicts = n_process_verdicts(original_run(), multi, 2)
    findings = [
        {"code": "ACC902", "message": "rank-dependent break", "filename": "train.py", "line": 3, "column": 1},
        {"code": "ACC919", "message": "rank-local average", "filename": "train.py", "line": 9, "column": 1},
    ]
    attach_findings(verdicts, findings)
    hang = by_key(verdicts)["no-hang"]
    assert [finding["code"] for finding in hang.findings] == ["ACC902"]
    assert all(not item.findings for item in verdicts if item.holds)


def test_the_retry_announcement_is_the_only_line_a_conversion_may_add() -> None:
    """``--oom-retry`` prints the batch size of each attempt on purpose: not a difference. Any
    other added line, or that line where the original prints it too, still is."""
    original = original_run()
    announced = rank_records(0, 1, prints=("Training with batch size 16", "epoch 0 loss 0.51", "done"))
    converted = RunTrace("converted", {0: announced}, files=dict(original.files))
    assert by_key(one_process_verdicts(original, converted))["stdout"].holds
    multi = right_multi()
    multi.records[0].insert(1, rec("print", 0, text="Training with batch size 8"))
    assert failed(n_process_verdicts(original, multi, 2)) == set()
    other = rank_records(0, 1, prints=("Training with batch size sixteen", "epoch 0 loss 0.51", "done"))
    assert not by_key(one_process_verdicts(original, RunTrace("converted", {0: other})))["stdout"].holds
    printing_it = original_run()
    printing_it.records[0].insert(1, rec("print", 0, text="Training with batch size 16"))
    again = rank_records(
        0, 1, prints=("Training with batch size 16", "Training with batch size 16", "epoch 0 loss 0.51", "done")
    )
    assert not by_key(one_process_verdicts(printing_it, RunTrace("converted", {0: again})))["stdout"].holds


def validated_every(steps_per_pass: int, passes: int, every: int, rank: int, world: int, crash: bool) -> list:
    """A rank of ``eval_every_n_steps_best``: a validation every ``every`` optimizer steps in the middle
    of the training passes; ``crash``: the epoch's print reads the accuracy of a validation not run."""
    records = [rec("start", rank, pid=1, argv=["t.py"], cwd=".", world_size=world, local_rank=rank)]
    step = 0
    for _ in range(passes):
        for _ in range(steps_per_pass):
            step += 1
            records.append(rec("step", rank, index=step - 1, digest=f"d{step}", norm=1.0))
            if step % every == 0:
                records.append(
                    rec("pass", rank, loader="t.py:38", grad=False, samples=200, gathered=200, complete=True)
                )
        records.append(rec("pass", rank, loader="t.py:37", grad=True, samples=64 * steps_per_pass, complete=True))
        if crash and step < every:
            error = "UnboundLocalError: cannot access local variable 'correct'"
            return [*records, rec("exit", rank, code=1, exception=error, site="t.py:70")]
    return [*records, rec("exit", rank, code=0, exception=None, site=None)]


def cadence_runs(multi_steps_per_pass: int, passes: int = 2, crash: bool = True) -> tuple[RunTrace, RunTrace]:
    original = RunTrace("original", {0: validated_every(4, passes, 3, 0, 1, crash)})
    multi = RunTrace(
        "converted on 2",
        {rank: validated_every(multi_steps_per_pass, passes, 3, rank, 2, crash) for rank in (0, 1)},
    )
    return original, multi


def test_a_step_cadence_the_n_process_run_never_reaches_is_named_with_the_budget() -> None:
    """The budget (256 samples, batch 64) gives 4 steps per pass on one process and 2 per rank on
    two: the validation every 3 steps never runs there, and the script crashes on its result."""
    original, multi = cadence_runs(2)
    cadence = unreached_cadence(original, multi, 256)
    assert cadence is not None and (cadence.step, cadence.taken, cadence.budget_cut) == (3, 2, True)
    verdicts = n_process_verdicts(original, multi, 2)
    explain_unreached_cadence(verdicts, cadence, 2, "rerun with --samples 512 or more")
    crash = by_key(verdicts)["no-crash"]
    assert not crash.holds and "UnboundLocalError" in crash.evidence[0]
    assert "after optimizer step 3" in crash.evidence[-1] and "took 2 steps" in crash.evidence[-1]
    assert crash.evidence[-1].endswith(
        "the budget can explain this, not the conversion: rerun with --samples 512 or more"
    )
    assert all(item.holds or "step cadence" in item.evidence[-1] for item in verdicts)
    # a dataset smaller than the budget (256 samples of 512, whole): the converted script does this too
    cadence = unreached_cadence(original, multi, 512)
    assert cadence is not None and not cadence.budget_cut and "the budget cut none" in cadence.explanation(2)


def test_no_step_cadence_is_blamed_when_the_steps_were_reached_or_training_never_ran() -> None:
    original, multi = cadence_runs(4)
    assert unreached_cadence(original, multi, 256) is None
    # rank 0 failed before the end of its first training pass: not the budget
    original, multi = cadence_runs(2)
    for rank in (0, 1):
        multi.records[rank] = [r for r in multi.records[rank] if not (r["kind"] == "pass" and r["grad"])]
    assert unreached_cadence(original, multi, 256) is None


def test_evaluations_of_a_step_cadence_beyond_the_steps_a_rank_took_are_not_expected() -> None:
    """Two passes of 4 steps validate after steps 3 and 6; two passes of 2 steps per rank reach
    step 3 only: one validation is what the original does in those steps."""
    original, multi = cadence_runs(2, crash=False)
    verdict = by_key(n_process_verdicts(original, multi, 2))["evaluation-counts"]
    assert verdict.holds, verdict.evidence
    # a rank that skipped the validation its steps reached is still named
    multi.records[1] = [r for r in multi.records[1] if not (r["kind"] == "pass" and not r["grad"])]
    verdict = by_key(n_process_verdicts(original, multi, 2))["evaluation-counts"]
    assert not verdict.holds
    assert "rank 1: 0 evaluation passes, the original 1 within the 4 optimizer steps this rank took" in verdict.evidence


def test_on_one_process_the_first_device_is_the_same_with_or_without_its_index() -> None:
    """d2l's ``try_gpu()`` is ``cuda:0``; the converted script prints ``accelerator.device``
    (``cuda``): the same device. Another index is another device."""
    original = RunTrace("original", {0: [rec("print", text="training on cuda:0")]})
    converted = RunTrace("converted", {0: [rec("print", text="training on cuda")]})
    assert by_key(one_process_verdicts(original, converted))["stdout"].holds
    converted.records[0][0]["text"] = "training on cuda:1"
    assert not by_key(one_process_verdicts(original, converted))["stdout"].holds


def stopped_early(epochs: int, rank: int, world: int, code: int = 0) -> list:
    """``early_stop_helper_print``: one line and one validation per epoch until the losses stop it."""
    records = [rec("start", rank, pid=1, argv=["t.py"], cwd=".", world_size=world, local_rank=rank)]
    for epoch in range(epochs):
        records.append(rec("step", rank, index=epoch, digest=f"d{epoch}", norm=1.0))
        records.append(rec("pass", rank, loader="t.py:20", grad=True, samples=64, complete=True))
        records.append(rec("pass", rank, loader="t.py:21", grad=False, samples=200, gathered=200, complete=True))
        if rank == 0:
            records.append(rec("print", rank, text=f"Epoch {epoch}: train 0.5 val 0.4"))
    return [*records, rec("exit", rank, code=code, exception=None, site=None)]


def test_a_stop_decided_from_the_losses_is_named_when_the_epochs_differ() -> None:
    """On two processes each step averages two batches: the losses differ, early stopping stops
    after 18 epochs instead of 8, and every per-epoch line and validation is counted 18 times."""
    original = RunTrace("original", {0: stopped_early(8, 0, 1)})
    multi = RunTrace("converted on 2", {rank: stopped_early(18, rank, 2) for rank in (0, 1)})
    verdicts = by_key(n_process_verdicts(original, multi, 2))
    for key in ("prints-once", "evaluation-counts"):
        assert not verdicts[key].holds
        assert (
            "the original made 8 passes over its training data, rank 0 of the converted on 2 18"
            in (verdicts[key].evidence[-1])
        )
    # a run that crashed made fewer passes for another reason
    multi = RunTrace("converted on 2", {rank: stopped_early(3, rank, 2, code=1) for rank in (0, 1)})
    verdicts = by_key(n_process_verdicts(original, multi, 2))
    assert not any("passes over its training data" in line for item in verdicts.values() for line in item.evidence)


def test_a_pass_with_gradients_on_but_no_training_is_an_evaluation() -> None:
    """``for x, y in loader: with torch.no_grad(): ...``: gradients are on when each batch is
    fetched; no backward ran, so its counts are checked (here: one rank's share, nothing gathered)."""
    original = original_run()
    multi = right_multi()
    for run in (original, multi):
        for record in run.of("pass"):
            record.update(grad=True, trained=False)
    for record in multi.of("pass"):
        record["gathered"] = None
    verdict = by_key(n_process_verdicts(original, multi, 2))["evaluation-counts"]
    assert not verdict.holds and "counts 50 samples (its own share" in verdict.evidence[0]


def test_a_quoted_prediction_is_a_value_like_a_number_on_n_processes() -> None:
    """``reload_for_inference`` prints the reloaded model's prediction for one image: trained on
    two processes (each step on two batches) it predicts another class."""
    assert mask_numbers('Predicted: "lathe", Actual: "press"') == mask_numbers('Predicted: "fan", Actual: "press"')
    assert mask_numbers("label 'cat'") == mask_numbers("label 'dog'")
    assert mask_numbers('Predicted: "fan"') != mask_numbers('Expected: "fan"')


def test_a_file_named_by_its_time_and_pid_is_the_same_file_in_every_run() -> None:
    """TensorBoard's ``SummaryWriter`` names its event file by the time, host and pid of the run."""
    original = original_run()
    original.files["runs/tb/events.out.tfevents.1796472955.vm.5331.0"] = "t1"
    converted = RunTrace("converted", {0: original.records[0]}, files=dict(original.files))
    del converted.files["runs/tb/events.out.tfevents.1796472955.vm.5331.0"]
    converted.files["runs/tb/events.out.tfevents.1796472965.vm.5448.0"] = "t2"
    assert by_key(one_process_verdicts(original, converted))["files"].holds
    multi = right_multi()
    multi.files["runs/tb/events.out.tfevents.1796472978.vm.5625.0"] = "t3"
    multi.records[0].append(rec("write", 0, path="runs/tb/events.out.tfevents.1796472978.vm.5625.0", sha256="t3"))
    assert by_key(n_process_verdicts(original, multi, 2))["files-once"].holds
    # with no file of the same pattern in the converted run, the original's is missing
    del converted.files["runs/tb/events.out.tfevents.1796472965.vm.5448.0"]
    verdict = by_key(one_process_verdicts(original, converted))["files"]
    assert not verdict.holds and "written by the original, not by the converted run" in verdict.evidence[0]
