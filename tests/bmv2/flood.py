"""Send one raw Ethernet frame (hex) on an interface for a number of seconds; print
how many were sent. With a fourth argument, the byte offset of a 32-bit sequence
number in the frame, each frame carries the next one. With a fifth, frames a second
(as fast as possible without it, or with 0)."""

import socket
import struct
import sys
import time

intf, frame, seconds = sys.argv[1], bytearray.fromhex(sys.argv[2]), float(sys.argv[3])
offset = int(sys.argv[4]) if len(sys.argv) > 4 else None
rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
sent = 0
with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
    sock.bind((intf, 0))
    start = time.monotonic()
    end = start + seconds
    while (now := time.monotonic()) < end:
        if rate and sent >= rate * (now - start):
            time.sleep(0.001)
            continue
        for _ in range(100):
            if offset is not None:
                struct.pack_into("!I", frame, offset, sent)
            try:
                sock.send(frame)
                sent += 1
            except BlockingIOError:
                pass
print(sent, flush=True)
