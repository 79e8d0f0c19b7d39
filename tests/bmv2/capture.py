"""Record every frame arriving on an interface until SIGTERM; then write them to a
file (hex, one per line) and print how many. Prints "listening" once ready."""

import signal
import socket
import sys
from pathlib import Path

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33  # (root) beyond net.core.rmem_max

intf, path = sys.argv[1], Path(sys.argv[2])
frames: list[bytes] = []


def stop(signum: int, frame: object) -> None:
    path.write_text("\n".join(f.hex() for f in frames))
    print(len(frames), flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
# Room for a burst (a switch's replicas): past its default the kernel would drop them.
sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
sock.bind((intf, 0))
print("listening", flush=True)
while True:
    data, address = sock.recvfrom(65535)
    if address[2] != PACKET_OUTGOING:
        frames.append(data)
