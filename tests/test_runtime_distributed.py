"""Two real ranks (plain ``torchrun --nproc_per_node 2`` on CPU, no extra env var): state, collectives,
gather_for_metrics, training equivalence, accumulation, unused parameters, mixed precision.

One launch of tests/scripts/runtime_checks.py serves every test here (launches cost seconds).
"""

from __future__ import annotations

import json

import pytest

from tests.launching import REPO_ROOT, torchrun

SCRIPT = REPO_ROOT / "tests" / "scripts" / "runtime_checks.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    work = tmp_path_factory.mktemp("checks")
    torchrun(SCRIPT, str(work), nproc=2, timeout=240).check()
    return [json.loads((work / f"result_rank{rank}.json").read_text()) for rank in (0, 1)]


def test_plain_torchrun_on_cpu_gives_two_real_ranks(ranks: list[dict]) -> None:
    for index, result in enumerate(ranks):
        state = result["state"]
        assert state["num_processes"] == 2
        assert state["process_index"] == index == state["local_process_index"]
        assert state["device"] == "cpu"
        assert (state["distributed_type"], state["backend"], state["use_distributed"]) == ("MULTI_CPU", "gloo", True)
        assert state["is_main_process"] == (index == 0)
        assert state["is_last_process"] == (index == 1)
        assert state["recreated_same_rank"]


def test_collectives_on_nested_structures(ranks: list[dict]) -> None:
    for result in ranks:
        observed = result["collectives"]
        assert observed["gather_a"] == [0, 1]
        assert observed["gather_b0"] == [[0, 0], [1, 1]]
        assert observed["gather_pair_is_namedtuple"] == "Pair"
        assert observed["gather_scalar"] == [0, 1]  # 0-d tensors become one row each
        assert observed["gather_object"] == ["r0", 0, "r1", 1]
        # Small structures travel as one buffer of bytes: every dtype and shape must come back.
        assert observed["gather_mixed"] == {
            "flags": ["torch.bool", [4], [True, True, False, True]],
            "half": ["torch.float16", [2, 2], [[0.5, 0.5], [1.5, 1.5]]],
            "empty": ["torch.float32", [0, 3], []],
            "grad": ["torch.float32", [2], [0.0, 1.0]],
        }
        assert observed["broadcast"] == [7]
        assert "Unsupported types" in observed["type_error"]
        # Gloo would return garbage here; every rank gets the same clear error instead.
        assert "rank 0: [(3,)]; rank 1: [(2,)]" in observed["shape_error"]
        assert "pad_across_processes" in observed["shape_error"]
        assert "rank 0: [(2,), (2, 1)]; rank 1: [(2,), (2, 2)]" in observed["nested_shape_error"]
        assert "dtypes differ" in observed["dtype_error"]
        assert "rank 0: ['torch.int64']; rank 1: ['torch.float32']" in observed["dtype_error"]
        assert observed["gather_after_errors"] == [0, 1]  # the ranks are still in step


def test_reduce_matches_accelerates_observed_results(ranks: list[dict]) -> None:
    # Reference §4 [verified]: ranks [1,10] and [2,10] -> sum [3,20], mean [1.5,10], none == sum, max [2,10].
    for result in ranks:
        assert result["collectives"]["reduce"] == {
            "sum": [3.0, 20.0],
            "mean": [1.5, 10.0],
            "none": [3.0, 20.0],
            "max": [2.0, 10.0],
        }
    assert [result["collectives"]["reduce_leaves_input"] for result in ranks] == [[1.0, 10.0], [2.0, 10.0]]


def test_pad_across_processes(ranks: list[dict]) -> None:
    first, second = (result["collectives"] for result in ranks)
    assert (first["pad"], first["pad_first"]) == ([0, 1, -1], [-1, 0, 1])
    assert (second["pad"], second["pad_first"]) == ([0, 1, 2], [0, 1, 2])


def test_split_between_processes(ranks: list[dict]) -> None:
    first, second = (result["collectives"]["split"] for result in ranks)
    assert (first["list"], second["list"]) == ([0, 1, 2], [3, 4])
    assert (first["list_padded"], second["list_padded"]) == ([0, 1, 2], [3, 4, 4])
    assert (first["dict"], second["dict"]) == ([0, 1], [2, 3])


def test_gather_for_metrics_returns_every_sample_once(ranks: list[dict]) -> None:
    for result in ranks:
        observed = result["gather_for_metrics"]
        assert observed["cases"] == 88
        assert observed["failures"] == []


def test_without_padding_gives_every_sample_to_one_rank_once(ranks: list[dict]) -> None:
    """Per-rank counts summed after an evaluation (ACC113's input-gradient loops) count each
    sample once: the last round's padding is cut off, and kept as empty batches on request."""
    for result in ranks:
        observed = result["without_padding"]
        assert observed["cases"] == 88
        assert observed["failures"] == []


def test_process_helpers(ranks: list[dict]) -> None:
    first, second = (result["helpers"] for result in ranks)
    assert (first["calls"], second["calls"]) == (["main"], ["last", "p1"])
    assert (first["main_ran_first"], second["main_ran_first"]) == ([False], [True])
    assert first["saved"] == second["saved"] == 0  # only rank 0 wrote
    assert first["leftover_temp_files"] == []
    assert first["trigger"] == second["trigger"] == [True, False]


def test_two_processes_batch_b_equal_one_process_batch_2b(ranks: list[dict]) -> None:
    for result in ranks:
        assert result["equivalence"]["is_ddp"] == "RuntimeDDP"
        assert result["equivalence"]["max_diff"] < 1e-6


def test_accumulation_equals_no_accumulation_over_same_global_batches(ranks: list[dict]) -> None:
    for result in ranks:
        observed = result["equivalence_accumulation"]
        assert observed["max_diff"] < 1e-6
        assert observed["syncs"] == [False, True] * 8


def test_unused_parameters_train_without_a_flag(ranks: list[dict]) -> None:
    for result in ranks:
        for accumulation in ("accumulation_1", "accumulation_2"):
            assert result["unused"][accumulation] == {"ranks_agree": True, "pooler_unchanged": True, "trained": True}


def test_outputs_the_loss_leaves_out_train_without_a_flag(ranks: list[dict]) -> None:
    # Every head is in the forward's outputs, only one in the first loss: judged by the outputs
    # alone, plain DDP was kept and the next forward failed ("Expected to have finished reduction").
    for result in ranks:
        assert result["discarded_outputs"] == {"error": None, "ranks_agree": True, "find_unused": True}


def test_a_model_no_loss_reaches_stops_costing_a_collective_per_backward(ranks: list[dict]) -> None:
    # A detached teacher is never reached by a loss: before the bound it was asked about (a walk
    # of the loss's graph and an all-reduce) at every backward of the run; a loss through a
    # reentrant checkpoint hid every parameter behind it and was never taken as an answer.
    for result in ranks:
        observed = result["no_loss_reaches"]
        assert observed["batches"] == 16
        assert observed["teacher"] == [True] * 7 + [False] * 9
        assert observed["checkpointed"] == [False] * 16


def test_a_reentrant_activation_checkpoint_trains_as_one_process_does(ranks: list[dict]) -> None:
    # The checkpointed block's parameters are not in the forward's graph: taking them for unused
    # (find_unused_parameters) made DDP fail with "marked ready twice" when backward recomputed it.
    for result in ranks:
        observed = result["reentrant_checkpoint"]
        assert observed["error"] is None
        assert observed["max_diff"] < 1e-6
        assert observed["find_unused"] is False


def test_changing_unused_parameters_error_names_them_and_the_fix(ranks: list[dict]) -> None:
    for result in ranks:
        message = result["unused"]["explained_error"]
        assert "extra.weight" in message and "extra.bias" in message
        assert "find_unused_parameters=True" in message
        assert "body.weight" not in message


def test_accumulate_really_skips_the_all_reduce(ranks: list[dict]) -> None:
    """Exactly one all-reduce round per optimizer step under accumulate(4), with or without unused
    parameters: non-sync micro-steps communicate nothing and keep their own gradients."""
    for result in ranks:
        for name, expected_strategy in (("all_used", False), ("unused", True)):
            observed = result["no_sync"][name]
            sync_steps = [index for index, sync in enumerate(observed["syncs"]) if sync]
            assert len(sync_steps) == len(observed["syncs"]) // 4 >= 2
            # One bucket per backward for these small models: one all-reduce per sync step.
            assert observed["reduced_at"] == sync_steps, (name, observed)
            assert observed["local_grads_differ"] == [not sync for sync in observed["syncs"]], (name, observed)
            # Plain DDP after the first step when every parameter is used; find_unused otherwise.
            assert (observed["find_unused"], observed["static_graph"]) == (expected_strategy, False), name


def test_user_ddp_kwargs_override_the_static_graph_default(ranks: list[dict]) -> None:
    for result in ranks:
        assert result["user_ddp_kwargs"] == {"static_graph": False, "find_unused": True}


def test_bf16_inner_bf16_output_fp32(ranks: list[dict]) -> None:
    bf16 = ranks[0]["mixed_precision"]["bf16"]
    assert (bf16["inner"], bf16["output"], bf16["scaler"]) == ("torch.bfloat16", "torch.float32", False)


def test_fp16_on_cpu_really_autocasts_and_scales(ranks: list[dict]) -> None:
    for result in ranks:
        fp16, bf16 = result["mixed_precision"]["fp16"], result["mixed_precision"]["bf16"]
        assert (fp16["inner"], fp16["output"], fp16["scaler"]) == ("torch.float16", "torch.float32", True)
        assert fp16["skipped_clean_step"] is False
        # The norm is taken after unscaling (else it would be ~256x), and clipping twice is fine.
        assert fp16["clip_norms"][0] == pytest.approx(bf16["clip_norms"][0], rel=0.05)
        assert fp16["clip_norms"][1] <= 1.0 + 1e-3


def test_fp16_nan_gradient_skips_the_step_and_reports_it(ranks: list[dict]) -> None:
    for result in ranks:
        assert result["mixed_precision"]["fp16"]["nan_step"] == {"skipped": True, "params_unchanged": True}
