"""Send one raw Ethernet frame (hex) on an interface at a given rate (frames per
second) for a number of seconds; print how many the interface took (a full queue
refuses the rest: ENOBUFS)."""

import errno
import socket
import sys
import time

intf, frame, rate, seconds = (sys.argv[1], bytes.fromhex(sys.argv[2]), float(sys.argv[3]),
                              float(sys.argv[4]))
sent = 0
with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
    sock.bind((intf, 0))
    start = time.monotonic()
    n = 0
    while (now := time.monotonic()) < start + seconds:
        due = start + n / rate
        if due > now:
            time.sleep(due - now)
        n += 1
        try:
            sock.send(frame)
            sent += 1
        except OSError as exc:
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                raise
print(sent, flush=True)
