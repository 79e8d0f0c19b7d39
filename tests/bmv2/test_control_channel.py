"""The lab's control channel on Mininet + BMv2: P4Runtime only over TLS with a
client certificate of the lab's CA (a client without one, or with one of another
CA, gets no connection), BMv2's Thrift servers refused, and the lab's commands
working over TLS with the credentials the lab keeps in its run directory."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import finsy as fy
import pytest

from ina.control.access import Access
from ina.control.p4runtime import connect
from ina.errors import SwitchError
from ina.lab.labstate import LabRecord
from ina.lab.mininet import thrift_port
from ina.lab.pki import make_lab_pki

from bmv2.bmv2lab import NetLab
from inatest import FIGURE1

#: Seconds a refused client may take to find out (a refusal is immediate).
REFUSED_WITHIN = 5.0


async def _connect(lab: NetLab, access: Access) -> None:
    async with connect(lab.topology, lab.lab.p4info, access=access, write=False,
                       timeout=REFUSED_WITHIN):
        pass


def test_a_plaintext_client_is_refused(figure1_lab: NetLab) -> None:
    with pytest.raises(SwitchError, match="cannot connect"):
        asyncio.run(_connect(figure1_lab, Access.insecure()))


def test_a_tls_client_without_a_certificate_is_refused(figure1_lab: NetLab) -> None:
    """It trusts the lab's CA, but has no certificate of its own to show."""
    ca = LabRecord(figure1_lab.topology.name).tls_dir / "ca.pem"
    spec = figure1_lab.topology.switches["s1"]
    options = fy.SwitchOptions(p4info=figure1_lab.lab.p4info, device_id=spec.device_id,
                               channel_credentials=fy.GRPCCredentialsTLS(
                                   cacert=ca, cert=None, private_key=None,
                                   target_name_override="s1"))

    async def attempt() -> None:
        async with asyncio.timeout(REFUSED_WITHIN), fy.Switch("s1", spec.grpc, options):
            pass

    with pytest.raises(Exception) as err:
        asyncio.run(attempt())
    assert not isinstance(err.value, TimeoutError), "not refused, left waiting"


def test_a_client_with_a_certificate_of_another_ca_is_refused(
        figure1_lab: NetLab, tmp_path: Path) -> None:
    make_lab_pki(tmp_path / "tls", figure1_lab.topology)  # a lab of its own
    with pytest.raises(SwitchError, match="cannot connect"):
        asyncio.run(_connect(figure1_lab, Access.tls_in(tmp_path / "tls")))


def test_the_switches_thrift_ports_are_refused(figure1_lab: NetLab) -> None:
    for spec in figure1_lab.topology.switches.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", thrift_port(spec.device_id)), timeout=5)


def test_inactl_works_over_tls_with_the_credentials_in_the_run_directory(
        figure1_lab: NetLab) -> None:
    status = subprocess.run([sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1),
                             "--p4info", str(figure1_lab.lab.p4info), "status"],
                            capture_output=True, text=True)
    assert status.returncode == 0 and "s7 (" in status.stdout, status.stderr


def test_inactl_insecure_is_refused_by_switches_that_require_tls(figure1_lab: NetLab) -> None:
    status = subprocess.run([sys.executable, "-m", "ina.cli.inactl", "-t", str(FIGURE1),
                             "--p4info", str(figure1_lab.lab.p4info), "--insecure",
                             "--timeout", str(REFUSED_WITHIN), "status"],
                            capture_output=True, text=True)
    assert status.returncode == SwitchError.exit_code, status.stderr
    assert "cannot connect" in status.stderr
