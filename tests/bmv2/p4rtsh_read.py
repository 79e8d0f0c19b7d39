"""Run with p4runtime-shell's own Python (its venv): connect to one switch as
docs/inspect.md says (election id 0,0, no --config, the lab's TLS files), print what
it reads as one JSON line, wait for a line on stdin, disconnect.

    python p4rtsh_read.py GRPC_ADDR DEVICE_ID TLS_DIR TABLE COUNTER

(the P4 names of a table and a counter, from ina.control.p4names: this script cannot
import the project, whose protobuf is another than p4runtime-shell's).
"""

import json
import sys

import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import SSLOptions

addr, device, tls, table, counter = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
sh.setup(device_id=device, grpc_addr=addr, election_id=(0, 0), verbose=False,
         ssl_options=SSLOptions(False, f"{tls}/ca.pem", f"{tls}/controller.pem",
                                f"{tls}/controller.key"))
entries = [str(te) for te in sh.TableEntry(table).read()]
packets = sum(c.packet_count for c in sh.CounterEntry(counter).read())
print(json.dumps({"entries": entries, "packets": packets}), flush=True)
sys.stdin.readline()
sh.teardown()
