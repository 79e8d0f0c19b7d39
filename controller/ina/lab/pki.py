"""The certificates of a lab's P4Runtime channels (with ``cryptography``).

``make_lab_pki(directory, topology)`` makes a CA, then a certificate per switch (its
name and the host of its gRPC address as subject alternative names, for a server)
and one for the controller (for a client), all signed by the CA; it writes
``ca.pem``, ``NAME.pem`` and ``NAME.key`` (ina.control.access names them) into a
fresh directory of mode 0700, private keys mode 0600. The CA's private key is
never written: once the lab is made, nobody can sign another certificate its
switches would accept. Keys are ECDSA P-256; certificates are valid from a minute
ago for 30 days (a lab is not meant to run longer).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ina.control.access import CA_FILE, CONTROLLER, TlsFiles, cert_file, key_file
from ina.errors import LabError
from ina.spec.topology import Topology

VALIDITY = datetime.timedelta(days=30)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ina lab"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(name: str, grpc: str | None) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = [x509.DNSName(name)]
    if grpc is not None:
        host = grpc.rpartition(":")[0].strip("[]")
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL in a directory made for it: no file of anyone else is reused or followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _issue(directory: Path, name: str, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate,
           grpc: str | None, now: datetime.datetime) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if grpc is not None else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(_san(name, grpc), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(key_file(directory, name), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()), 0o600)
    _write(cert_file(directory, name), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def make_lab_pki(directory: Path, topology: Topology) -> TlsFiles:
    """A CA and the certificates of ``topology``'s switches and of the controller, in
    ``directory`` (which must not exist); the controller's files."""
    if CONTROLLER in topology.switches:
        raise LabError(f"a switch named {CONTROLLER!r} would share the controller's "
                       "certificate files: rename it")
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=0o700)
    except FileExistsError:
        raise LabError(f"{directory} exists already (the credentials of another lab?): "
                       "refusing to replace them") from None
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"ina lab CA {topology.name}")
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=1))
          .not_valid_after(now + VALIDITY)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    _write(directory / CA_FILE, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    for name, spec in sorted(topology.switches.items()):
        _issue(directory, name, ca_key, ca, spec.grpc, now)
    _issue(directory, CONTROLLER, ca_key, ca, None, now)
    return TlsFiles.in_directory(directory)


def switch_tls_args(directory: Path, switch: str) -> list[str]:
    """simple_switch_grpc's options (after ``--``) for TLS with client authentication."""
    return ["--grpc-server-ssl", "--grpc-server-cacert", str(directory / CA_FILE),
            "--grpc-server-cert", str(cert_file(directory, switch)),
            "--grpc-server-key", str(key_file(directory, switch)),
            "--grpc-server-with-client-auth"]
