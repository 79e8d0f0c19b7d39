"""The torch.distributed backend ``ina`` and the DDP hook, on the embedded network:
four real rank processes (torchrun's variables), the reference model served on the
loopback by the process rank 0 starts, the same controller writes and wire format
as on BMv2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install 'ina[torch]' "
                                    "(make setup installs it)")

from torchranks import TORCH_COLLECTIVES, RankPool, check_collective, free_port, run_once

from inatest import FIGURE1, FIGURE1_JOB, ROOT

JOB_ENV = {"INA_TOPOLOGY": str(FIGURE1), "INA_JOB": str(FIGURE1_JOB), "INA_NETWORK": "auto"}
DTYPES = ["float32", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64"]
OPS = ["SUM", "AVG", "MIN", "MAX"]


@pytest.fixture(scope="module")
def ranks() -> Iterator[RankPool]:
    pool = RankPool(4, JOB_ENV)
    try:
        yield pool
    finally:
        pool.close()


def test_import_registers_the_backend() -> None:
    import torch.distributed as dist

    import ina.torch  # noqa: F401

    assert "ina" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["ina"] == ["cpu"]


def test_init_process_group_makes_every_rank_its_worker(ranks: RankPool) -> None:
    reports = ranks.run("backend")
    assert [r["backend"] for r in reports] == ["ina"] * 4
    assert [r["rank"] for r in reports] == [0, 1, 2, 3]


def test_the_ranks_share_a_secret_for_the_ring_on_hosts(ranks: RankPool) -> None:
    secrets = {r["ring_secret"] for r in ranks.run("backend")}
    assert len(secrets) == 1 and None not in secrets


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_of_every_type_and_op(ranks: RankPool, dtype: str, op: str) -> None:
    reports = ranks.run("allreduce", dtype=dtype, op=op, shape=[3, 300], seed=7)
    assert len({r["digest"] for r in reports}) == 1  # the same result at every rank
    for r in reports:
        assert r["shape"] == [3, 300] and r["dtype"] == dtype
        if dtype.startswith(("float", "bfloat")):
            assert r["within_bound"] is True
        else:
            assert r["max_error"] == 0 and r["within_bound"] is None


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_integer_all_reduce_gives_the_same_bits_as_gloo(ranks: RankPool, dtype: str) -> None:
    for r in ranks.run("like_gloo", dtype=dtype, shape=[1000], seed=3):
        assert r["same_bits"] is True


def test_int32_sum_wraps_around_as_gloo_does(ranks: RankPool) -> None:
    for r in ranks.run("wrapping_sum"):
        assert r["same_bits"] is True
        assert r["value"] == (4 * 2**30 + 6) - 2**32


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_all_reduce_lies_within_its_bound_of_gloos(ranks: RankPool, dtype: str) -> None:
    for r in ranks.run("like_gloo", dtype=dtype, shape=[5000], seed=5):
        assert r["within_bound_of_exact"] is True
        assert r["within_bound_of_gloo"] is True  # its bound, plus gloo's own rounding


@pytest.mark.parametrize(("dtype", "op"), [
    ("float32", "PRODUCT"), ("float64", "SUM"), ("float64", "AVG"), ("int64", "SUM"),
    ("int64", "AVG"), ("bool", "SUM"), ("bool", "MIN")])
def test_what_the_switches_cannot_reduce_goes_to_gloo_as_gloo_reduces_it(
        ranks: RankPool, dtype: str, op: str) -> None:
    for r in ranks.run("beside_gloo", op=op, dtype=dtype):
        assert r["same_as_gloo"] is True, r
        assert r["counted"] == {"allreduce": {"gloo": 1}}, r


def test_async_all_reduces_complete_in_any_wait_order(ranks: RankPool) -> None:
    for r in ranks.run("async_calls", count=5, size=700):
        assert r["values"] == r["expected"] == r["future_values"]
        assert r["futures_done"]


def test_many_calls_in_a_row_on_one_deployed_job(ranks: RankPool) -> None:
    for r in ranks.run("repeated", calls=40):
        assert r["wrong"] == 0


def test_a_group_of_every_rank_is_a_job_of_its_own_beside_ina_jobs(ranks: RankPool) -> None:
    for r in ranks.run("subgroup", members=[0, 1, 2, 3], calls=2):
        assert r["wrong"] == 0 and r["stats"] == {"allreduce": {"switches": 2}}
        assert r["world_job"] == 1  # INA_JOB's
        assert r["job"]["job_id"] != 1 and r["job"]["workers"] == ["w1", "w2", "w3", "w4"]


def test_a_noncontiguous_tensor_is_reduced_in_place(ranks: RankPool) -> None:
    assert all(r["ok"] for r in ranks.run("noncontiguous"))


# --- Every other collective -------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(TORCH_COLLECTIVES))
def test_every_collective_goes_where_it_should_and_matches_the_reference(
        ranks: RankPool, name: str, dtype: str) -> None:
    check_collective(ranks.run("collective", name=name, dtype=dtype, root=2), name, dtype)


@pytest.mark.parametrize("root", [0, 3])
def test_broadcast_from_any_rank(ranks: RankPool, root: int) -> None:
    check_collective(ranks.run("collective", name="broadcast", dtype="float32", root=root),
                      "broadcast", "float32")


@pytest.mark.parametrize("op", ["AVG", "MIN", "MAX"])
@pytest.mark.parametrize("name", ["reduce", "reduce_scatter_tensor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_reductions_of_every_op(ranks: RankPool, name: str, op: str, dtype: str) -> None:
    check_collective(ranks.run("collective", name=name, dtype=dtype, op=op, root=3),
                      name, dtype)


def test_a_reduce_scatter_of_sizes_the_ranks_do_not_divide(ranks: RankPool) -> None:
    check_collective(ranks.run("collective", name="reduce_scatter_tensor", dtype="float16",
                                part=1),
                      "reduce_scatter_tensor", "float16")


def test_barrier_goes_through_the_switches(ranks: RankPool) -> None:
    for r in ranks.run("collective", name="barrier", dtype="int32"):
        assert r["counted"] == {"barrier": {"switches": 1}}


def test_all_to_all_gather_and_scatter_go_through_gloo_and_are_counted(ranks: RankPool
                                                                       ) -> None:
    for rank, r in enumerate(ranks.run("via_gloo")):
        assert r["all_to_all"] == [10.0 * src + rank for src in range(4)]
        assert r["gathered"] == ([0.0, 1.0, 2.0, 3.0] if rank == 0 else None)
        assert r["scattered"] == float(rank)
        assert r["counted"] == {"alltoall": {"gloo": 1}, "gather": {"gloo": 1},
                                "scatter": {"gloo": 1}}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_floats_travel_in_half_the_packets_of_float32_when_asked(
        ranks: RankPool, dtype: str) -> None:
    (full,) = {r["packets"] for r in ranks.run("packets", dtype="float32", size=20_000)}
    (half,) = {r["packets"] for r in ranks.run("packets", dtype=dtype, size=20_000,
                                                half_width=16)}
    assert half <= full / 2 + 2  # the exponents' and the descriptor's packets aside


def test_half_floats_are_summed_in_32_bit_elements_by_default(ranks: RankPool) -> None:
    (full,) = {r["packets"] for r in ranks.run("packets", dtype="float32", size=20_000)}
    narrow = ranks.run("packets", dtype="float16", size=20_000, half_width=16)
    wide = ranks.run("packets", dtype="float16", size=20_000)
    assert {r["packets"] for r in wide} == {full}
    assert wide[0]["max_bound"] < narrow[0]["max_bound"]  # finer quantization


def test_a_half_width_other_than_16_or_32_is_refused() -> None:
    from ina.errors import UsageError
    from ina.torch.member import Settings

    with pytest.raises(UsageError, match="INA_HALF_WIDTH must be 16 or 32"):
        Settings.from_env({**JOB_ENV, "INA_HALF_WIDTH": "8"})


def test_without_a_job_each_rank_is_a_host_of_the_topology() -> None:
    from ina.errors import UsageError
    from ina.spec.topology import Topology
    from ina.torch.member import Settings, choose_worker

    settings = Settings.from_env({"INA_TOPOLOGY": str(FIGURE1), "INA_NETWORK": "embedded"})
    assert settings.job is None
    topology = Topology.load(FIGURE1)
    assert choose_worker(None, topology, 2, 4, settings) == ("w3", "embedded")
    named = Settings(FIGURE1, worker="w7", network="embedded")
    assert choose_worker(None, topology, 0, 4, named) == ("w7", "embedded")
    with pytest.raises(UsageError, match="the world size is 9 but topology figure1 has 8"):
        choose_worker(None, topology, 0, 9, settings)
    with pytest.raises(UsageError, match="INA_WORKER=w9 is not a host"):
        choose_worker(None, topology, 0, 4, Settings(FIGURE1, worker="w9", network="embedded"))


# --- Training --------------------------------------------------------------------------


def test_ddp_training_through_the_switches_matches_gloo(ranks: RankPool) -> None:
    reports = ranks.run("train", steps=30, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        assert r["stats"]["allreduce"]["switches"] >= 30
        assert r["guessed"] >= 29  # every bucket after the first: its exponents guessed
        assert r["stats"]["broadcast"] == {"switches": 2}  # at DDP's first step
        assert all(set(where) == {"switches"} for where in r["stats"].values())


@pytest.mark.parametrize("version", ["fsdp1", "fully_shard"])
def test_fsdp_training_through_the_switches_matches_gloo(ranks: RankPool, version: str
                                                         ) -> None:
    reports = ranks.run("fsdp", version=version, steps=5, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        assert r["stats"]["reduce_scatter_single"]["switches"] >= 5
        gathers = "allgather" if version == "fsdp1" else "all_gather_single"
        assert r["stats"][gathers]["switches"] >= 5
        assert all(set(where) == {"switches"} for where in r["stats"].values())
        assert r["full_tensor_ok"] in (None, True)


def test_fsdp_in_bfloat16_through_16_bit_elements_stays_near_gloo(ranks: RankPool) -> None:
    # Parameters gathered and gradients reduce-scattered in bfloat16 (16-bit elements
    # on the wire): gloo's bfloat16 sums round too (its eps is 2**-8), so the runs
    # drift apart by a few roundings of lr x gradient per step, not more.
    reports = ranks.run("fsdp", version="fully_shard", steps=5, bf16=True, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-3
        assert all(set(where) == {"switches"} for where in r["stats"].values())


def test_several_gradient_buckets_in_flight_match_gloo(ranks: RankPool) -> None:
    # Small buckets: DDP issues its all_reduces during the backward pass, a bucket
    # at a time as its gradients are ready, without waiting (after step 1, where
    # the whole model is one bucket, this model's parameters make two).
    reports = ranks.run("train", steps=10, bucket_cap_mb=1 / 256, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        assert r["stats"]["allreduce"]["switches"] >= 1 + 2 * 9


def test_the_ddp_hook_on_a_gloo_group_matches_gloo(ranks: RankPool) -> None:
    reports = ranks.run("train", steps=30, hook=True, timeout=300)
    for r in reports:
        assert r["max_param_diff"] < 1e-4
        assert r["stats"]["ddp_hook_allreduce"]["switches"] >= 30


# --- Ranks of their own: the end of a process group, failures ------------------------


def test_every_rank_ends_cleanly_after_destroy_process_group() -> None:
    # A heartbeat thread left inside a store call when the group is destroyed made
    # torch abort one rank in three (SIGABRT): twice, to catch it.
    for _ in range(2):
        results = run_once(4, "repeated", JOB_ENV, timeout=90, params={"calls": 3})
        assert [code for code, _, _ in results] == [0] * 4, [err[-500:] for *_, err in results]


def _errors(results: list[tuple[int | None, str, str]]) -> list[str]:
    return [err for _, _, err in results]


def test_a_world_size_that_does_not_match_the_job_fails_at_init() -> None:
    results = run_once(3, "nothing", JOB_ENV, timeout=90)
    assert [code for code, _, _ in results] == [1, 1, 1]
    for err in _errors(results):
        assert "the world size is 3 but job 1" in err and "has 4 workers" in err


def test_a_job_file_that_is_not_valid_fails_at_init(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text("job_id: 1\nop: sum\nworkers: [w1, w2, w3, w99]\n")
    results = run_once(4, "nothing", {**JOB_ENV, "INA_JOB": str(bad)}, timeout=90)
    assert [code for code, _, _ in results] == [1] * 4
    for err in _errors(results):
        assert "w99" in err


def test_two_ranks_as_one_worker_fail_at_init() -> None:
    results = run_once(4, "nothing", {**JOB_ENV, "INA_WORKER": "w2"}, timeout=90)
    assert [code for code, _, _ in results] == [1] * 4
    for err in _errors(results):
        assert "are both w2" in err


def test_a_missing_topology_variable_is_named() -> None:
    results = run_once(4, "nothing", {**JOB_ENV, "INA_TOPOLOGY": ""}, timeout=90)
    for code, _, err in results:
        assert code == 1 and "INA_TOPOLOGY" in err


def test_a_rank_that_dies_ends_every_other_ranks_call_with_an_error() -> None:
    results = run_once(4, "die_after", {**JOB_ENV, "INA_TIMEOUT": "1"}, timeout=120,
                       params={"calls": 5, "victim": 2})
    codes = [code for code, _, _ in results]
    assert codes[2] == 17
    for rank in (0, 1, 3):
        code, out, _ = results[rank]
        assert code == 1, f"rank {rank} ended with {code}"
        assert "rank 2 (w3) stopped" in out



def test_a_rank_that_holds_the_gil_in_a_long_c_call_is_slow_not_dead() -> None:
    # Its Python threads stop for 8 s; the others' calls wait on (their timeout, 1 s,
    # asks whether every rank's process is still there), and all finish together.
    results = run_once(4, "gil_bound", {**JOB_ENV, "INA_TIMEOUT": "1"}, timeout=120,
                       params={"seconds": 8, "victim": 0})
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, (rank, out, err[-2000:])
        report = json.loads(out.strip().splitlines()[-1])["report"]
        assert report["value"] == 4.0 and report["elapsed"] >= 8.0, (rank, report)


def test_a_nan_or_an_infinity_at_one_rank_reaches_every_rank(ranks: RankPool) -> None:
    for report in ranks.run("specials", victim=2):
        for dtype in ("float32", "float16", "bfloat16"):
            assert report[dtype] == ["4.0", "nan", "inf"], (dtype, report)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_float_sum_is_no_coarser_than_gloos(ranks: RankPool, dtype: str) -> None:
    (report, *_) = ranks.run("half_sums", dtype=dtype)
    assert report["ina"] <= report["gloo"], report
    # [60000, 1, 3, 5] at four ranks: 240000 is past float16's range, not bfloat16's.
    assert report["edge"][1:] == ["4.0", "12.0", "20.0"], report
    assert (report["edge"][0] == "inf") == (dtype == "float16"), report


def test_the_example_trains_under_torchrun_on_the_embedded_network(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INA_")}
    env["TMPDIR"] = str(tmp_path)  # torchrun leaves its log directory (torchelastic_*) there
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
         "--master-port", str(free_port()), str(ROOT / "examples" / "train.py"),
         "--steps", "20", "--log-every", "0", "--json", str(report)],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(report.read_text())
    assert figures["backend"] == "ina" and figures["world"] == 4
    assert figures["collectives"]["allreduce"]["switches"] >= 20
    # The phases are the training loop's calls' alone: DDP's all-gather of the
    # parameters' shapes at its start and the example's barrier are not among them.
    assert figures["phases"]["reducing"] > 0
    assert figures["phases"].get("gathering", 0.0) == 0.0
    assert figures["phases"].get("waiting at the barrier", 0.0) == 0.0
