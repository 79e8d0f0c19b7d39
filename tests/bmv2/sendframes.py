"""Send raw Ethernet frames (one hex string per line of a file) on an interface."""

import socket
import sys
from pathlib import Path

intf, path = sys.argv[1], Path(sys.argv[2])
with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
    sock.bind((intf, 0))
    for line in path.read_text().split():
        sock.send(bytes.fromhex(line))
