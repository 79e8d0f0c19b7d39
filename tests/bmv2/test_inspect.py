"""Inspecting a running lab as docs/inspect.md says: p4runtime-shell in a venv of its
own, election id 0,0, no --config, the lab's TLS files, reads a deployed job's entries
and counters, and the controller stays primary and keeps writing; the Wireshark
dissector decodes what the lab's switches captured (inalab run --pcap)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ina.control import p4names
from ina.host.arrays import random_array
from ina.lab.mininet import Lab, LabOptions
from ina.spec.topology import Topology

from bmv2.bmv2lab import Deployed, Labs, NetLab
from inatest import FIGURE1, FIGURE1_SPEC, NO_TSHARK, ROOT, TSHARK, dissect

HERE = Path(__file__).resolve().parent
#: p4runtime-shell's own venv, which `make setup` makes (docs/inspect.md).
SHELL_VENV = ROOT / ".venv-p4rt"


@pytest.fixture(scope="module")
def shell_python() -> Path:
    python = SHELL_VENV / "bin" / "python"
    found = subprocess.run([str(python), "-c", "import p4runtime_sh"], capture_output=True) \
        if python.exists() else None
    if found is None or found.returncode != 0:
        pytest.skip(f"p4runtime-shell is not installed in {SHELL_VENV}: `make setup` installs "
                    "it there (a venv of its own: its protobuf is not finsy's)")
    return python


@pytest.mark.parametrize("deployed", [[{**FIGURE1_SPEC, "job_id": 7}]], indirect=True)
def test_p4runtime_shell_reads_a_job_and_the_controller_stays_primary(
        figure1_lab: NetLab, deployed: Deployed, shell_python: Path) -> None:
    (path, job), = deployed
    results, expected = figure1_lab.allreduce(path, job, 512, seed=1)  # something to count
    assert all((r == expected).all() for r in results.values())
    root = figure1_lab.topology.switches[job.root]
    shell = subprocess.Popen(
        [str(shell_python), str(HERE / "p4rtsh_read.py"), root.grpc, str(root.device_id),
         str(figure1_lab.lab.record.tls_dir), p4names.VAT_JOBS.name,
         p4names.INGRESS_JOB_STATS],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert shell.stdout is not None and shell.stdin is not None
        line = shell.stdout.readline()
        assert line, shell.stderr.read() if shell.stderr else ""
        read = json.loads(line)
        assert any("job_id" in e and "\\x07" in e for e in read["entries"]), read["entries"]
        assert read["packets"] > 0
        # The shell is connected, below the controller's election id: a deploy writes.
        with figure1_lab.deployed({**FIGURE1_SPEC, "job_id": 8}) as more:
            assert more[0][1].job_id == 8
        shell.stdin.write("\n")
        shell.stdin.flush()
        assert shell.wait(timeout=30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()



@pytest.fixture
def captured_lab(labs: Labs, compiled: Path, tmp_path: Path) -> Iterator[NetLab]:
    """Figure 1 with every switch port captured (inalab run --pcap), a lab of its own."""
    labs.stop()  # the session's labs share the switches' ports
    topology = Topology.load(FIGURE1)
    lab = Lab(topology, LabOptions(build_dir=compiled, pcap_dir=tmp_path / "pcap"))
    lab.start()
    try:
        lab.init_switches_sync()
        yield NetLab(lab, topology, FIGURE1, tmp_path)
    finally:
        lab.stop()


@pytest.mark.skipif(TSHARK is None, reason=NO_TSHARK)
def test_the_dissector_decodes_a_capture_of_the_lab(captured_lab: NetLab) -> None:
    with captured_lab.deployed(FIGURE1_SPEC) as ((path, job),):
        results, expected = captured_lab.allreduce(path, job, 3, seed=1)
    assert all((r == expected).all() for r in results.values())
    pcaps = captured_lab.lab.options.pcap_dir
    assert pcaps is not None
    topo = captured_lab.topology
    edge, port = topo.host_attachment("w1")
    sent = dissect(pcaps / f"{edge}-eth{port}_in.pcap", ("ina.job", "ina.bfr_id", "ina.value"),
                   # not the ICMP "port unreachable" that quotes a late result's header
                   # when it reaches w1 after its worker ended
                   "ina.count == 3 && ina.flags.sync == 0 && !icmp")
    assert sent and all(f == {"ina.job": ["1"], "ina.bfr_id": ["1"],
                              "ina.value": [str(v) for v in random_array(3, 1)]} for f in sent)
    root = topo.switches[job.root]
    up = next(p for p, nb in topo.ports(job.root).items() if nb.node in topo.switches)
    results_out = dissect(pcaps / f"{job.root}-eth{up}_out.pcap",
                          ("bier.proto", "bier.bfir_id", "ina.flags.result", "ina.value"),
                          "bier && ina.count == 3")
    assert results_out, f"no BIER result left {job.root} (device {root.device_id}) by port {up}"
    for f in results_out:
        assert f["bier.proto"] == ["4"] and f["ina.flags.result"] == ["1"]
        assert f["ina.value"] == [str(v) for v in expected]
