"""How a controller reaches the switches of a topology (``Access``): over TLS with a
certificate of its own, which the switches require (the default), or in plaintext
when asked for by name (``Access.insecure``); and the lock that makes the writers
of one machine take turns.

The P4Runtime specification asks for TLS and leaves election ids to the clients:
an election id alone says nothing about who a client is, so a switch that takes
any connection would make any client that reaches its port its primary, writer of
every table. With client authentication only holders of a certificate signed by
the lab's CA get a connection at all.

The TLS directory holds ``ca.pem`` (the CA that signed every certificate here),
``controller.pem`` and ``controller.key`` (the controller's), and ``NAME.pem`` and
``NAME.key`` for each switch NAME (its name and gRPC address as subject alternative
names). ``ina.lab.pki`` makes them for a lab; a controller reads only its own
three. A switch's certificate is checked against its name (the gRPC target name is
overridden with it): several switches may listen on one address.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ina.errors import UsageError

CA_FILE = "ca.pem"
CONTROLLER = "controller"  # the controller's certificate and key: controller.pem, .key
#: Seconds a writer waits for another writer of this machine (``Access.lock_file``).
LOCK_TIMEOUT = 30.0


def cert_file(directory: Path, name: str) -> Path:
    return directory / f"{name}.pem"


def key_file(directory: Path, name: str) -> Path:
    return directory / f"{name}.key"


@dataclass(frozen=True)
class TlsFiles:
    """What a client presents and trusts: the CA's certificate, its own certificate
    and private key (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_directory(cls, directory: Path, name: str = CONTROLLER) -> TlsFiles:
        """``name``'s files in ``directory``; UsageError naming what is missing."""
        files = cls(directory / CA_FILE, cert_file(directory, name), key_file(directory, name))
        missing = [p.name for p in (files.ca, files.cert, files.key) if not p.is_file()]
        if missing:
            raise UsageError(
                f"no TLS credentials for the switches in {directory} ({', '.join(missing)} "
                "missing): `inalab run` makes them and keeps them while its lab runs; give "
                "--insecure only to reach switches started without TLS")
        return files


@dataclass(frozen=True)
class Access:
    """How to reach a topology's switches: ``tls`` (None: plaintext, only through
    ``insecure``) and ``lock_file``, which every writer of this machine holds from
    before it connects until it has disconnected (None: no lock)."""

    tls: TlsFiles | None
    lock_file: Path | None = None
    lock_timeout: float = LOCK_TIMEOUT

    @classmethod
    def insecure(cls, lock_file: Path | None = None) -> Access:
        """Plaintext P4Runtime: only for switches started without TLS (a lab started
        with --insecure), since anyone who reaches a switch's port may then write."""
        return cls(None, lock_file)

    @classmethod
    def tls_in(cls, directory: Path, lock_file: Path | None = None) -> Access:
        return cls(TlsFiles.in_directory(directory), lock_file)
