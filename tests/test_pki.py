"""The lab's certificates (ina.lab.pki): one per switch naming it and its gRPC
address, one for the controller, all signed by a CA whose key is never written;
private keys readable by their owner only. And a command finds them, or is told
what is missing."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from ina.control.access import TlsFiles
from ina.errors import LabError, UsageError
from ina.lab.labstate import LabRecord
from ina.lab.pki import make_lab_pki
from ina.spec.topology import Topology


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and cert.signature_hash_algorithm
    key.verify(cert.signature, cert.tbs_certificate_bytes,
               ec.ECDSA(cert.signature_hash_algorithm))  # raises if not
    return cert.issuer == ca.subject


@pytest.fixture
def pki(tmp_path: Path, figure1: Topology) -> Path:
    make_lab_pki(tmp_path / "tls", figure1)
    return tmp_path / "tls"


def test_each_switch_has_a_certificate_naming_it_and_its_grpc_address(
        pki: Path, figure1: Topology) -> None:
    ca = _cert(pki / "ca.pem")
    for name, spec in figure1.switches.items():
        cert = _cert(pki / f"{name}.pem")
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert san.get_values_for_type(x509.DNSName) == [name]
        host = spec.grpc.rpartition(":")[0]
        assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(host)]
        assert _signed_by(cert, ca)


def test_the_controllers_certificate_is_for_a_client_and_signed_by_the_ca(pki: Path) -> None:
    cert = _cert(pki / "controller.pem")
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert _signed_by(cert, _cert(pki / "ca.pem"))


def test_private_keys_are_the_owners_only_and_the_cas_is_not_kept(
        pki: Path, figure1: Topology) -> None:
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700
    keys = sorted(p.name for p in pki.glob("*.key"))
    assert keys == sorted([f"{s}.key" for s in figure1.switches] + ["controller.key"])
    assert all(stat.S_IMODE((pki / k).stat().st_mode) == 0o600 for k in keys)
    assert {p.name for p in pki.iterdir()} - set(keys) == \
        {"ca.pem", "controller.pem", *(f"{s}.pem" for s in figure1.switches)}


def test_credentials_in_place_are_never_replaced(pki: Path, figure1: Topology) -> None:
    before = (pki / "ca.pem").read_bytes()
    with pytest.raises(LabError, match="exists already"):
        make_lab_pki(pki, figure1)
    assert (pki / "ca.pem").read_bytes() == before


def test_a_command_finds_the_labs_credentials_in_the_run_directory(
        tmp_path: Path, figure1: Topology) -> None:
    record = LabRecord(figure1.name, tmp_path)
    make_lab_pki(record.tls_dir, figure1)
    access = record.access()
    assert access.tls == TlsFiles(record.tls_dir / "ca.pem", record.tls_dir / "controller.pem",
                                  record.tls_dir / "controller.key")
    assert access.lock_file == record.lock_file


def test_a_command_without_credentials_is_told_to_start_the_lab_or_ask_for_insecure(
        tmp_path: Path) -> None:
    record = LabRecord("figure1", tmp_path)
    with pytest.raises(UsageError, match="--insecure") as err:
        record.access()
    assert str(record.tls_dir) in str(err.value)
    assert record.access(insecure=True).tls is None
