"""The host-based baselines of the benchmark compute the same sums (over loopback)."""

import threading
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from ina.host.baselines import ps_server, ps_worker, ring_allreduce
from ina.host.ring import Array
from ina.model.harness import reduce_arrays
from ina.protocol.constants import Op


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_all(fns: Sequence[Callable[[], Array]]) -> list[Array]:
    """Each function in a thread of its own; what each returned."""
    results: dict[int, Array] = {}

    def run(i: int) -> None:
        results[i] = fns[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == len(fns), "a peer did not finish"
    return [results[i] for i in range(len(fns))]


def test_ring_allreduce_sums_with_int32_wraparound() -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.integers(-(2**31), 2**31 - 1, 1001, dtype=np.int32) for _ in range(4)]
    port = _free_port()
    hosts = ["127.0.0.1"] * 4
    # Ranks listen on port + rank; pick a base with four free ports after it.
    results = _run_all([partial(ring_allreduce, r, hosts, port, arrays[r]) for r in range(4)])
    expected = reduce_arrays(Op.SUM, arrays)
    assert all(np.array_equal(r, expected) for r in results)


def test_parameter_server_sums() -> None:
    arrays = [np.arange(10, dtype=np.int32) * (i + 1) for i in range(3)]
    port = _free_port()
    server = threading.Thread(target=ps_server, args=(port, 3))
    server.start()
    results = _run_all([partial(ps_worker, "127.0.0.1", port, a) for a in arrays])
    server.join(30)
    assert all(np.array_equal(r, np.arange(10) * 6) for r in results)
