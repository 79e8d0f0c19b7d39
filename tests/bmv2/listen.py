"""Count UDP datagrams to the INA port until SIGTERM; print the count."""

import signal
import socket
import sys

from ina.constants import INA_UDP_PORT

count = 0


def stop(signum: int, frame: object) -> None:
    print(count, flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", INA_UDP_PORT))
print("listening", flush=True)
while True:
    sock.recv(65535)
    count += 1
