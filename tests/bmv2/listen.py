"""Count UDP datagrams to the INA port until SIGTERM; print the count.

With a path argument, also write each datagram there (hex, one per line).
"""

import signal
import socket
import sys
from pathlib import Path

from ina.protocol.constants import INA_UDP_PORT

received: list[bytes] = []


def stop(signum: int, frame: object) -> None:
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text("\n".join(d.hex() for d in received))
    print(len(received), flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", INA_UDP_PORT))
print("listening", flush=True)
while True:
    received.append(sock.recv(65535))
