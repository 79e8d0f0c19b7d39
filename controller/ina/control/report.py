"""Human-readable views shared by inactl, inalab and the demo."""

from __future__ import annotations

from ina.control.controller import SwitchStatus
from ina.control.switch import CounterValue


def render_status(status: dict[str, SwitchStatus], job_id: int | None = None) -> str:
    lines = []
    for sw, s in sorted(status.items()):
        lines.append(f"{sw} ({s.base_entries} base entries)")
        lines += [f"  ! {problem}" for problem in s.problems]
        for j in s.jobs:
            if job_id is not None and j.job_id != job_id:
                continue
            counts = ", ".join(f"{st.name.lower()} {v.packets}"
                               for st, v in s.job_stats[j.job_id].items() if v.packets)
            lines.append(f"  job {j.job_id}: {j.describe()}")
            lines.append(f"    {counts or 'no packets yet'}")
        events = ", ".join(f"{st.name.lower()} {v.packets}" for st, v in s.switch_stats.items()
                           if v.packets)
        lines.append(f"  switch: {events or 'no drops, no BIER copies'}")
        ports = []
        for port, sent in s.port_packets.items():
            marked = s.port_marks.get(port, CounterValue()).packets
            received = s.port_received.get(port, CounterValue()).packets
            if sent.packets or received:
                share = f" ({100 * marked / sent.packets:.1f}%)" if marked else ""
                ports.append(f"{port} received {received} sent {sent.packets} "
                             f"marked {marked}{share}")
        if ports:  # what came in, went out, was marked (ingress.p4, congestion.p4)
            lines.append(f"  ports: {', '.join(ports)}")
    return "\n".join(lines)
