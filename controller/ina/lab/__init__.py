"""Emulation and measurement: private namespaces (``sandbox``) and the record of
running labs, Mininet + BMv2 for a topology (``mininet``), deploying jobs on a
running lab (``deploy``), the demo, the benchmarks and the simulation at scale.
On top of every other subpackage."""
