"""Emulation: private namespaces (``sandbox``) and the record of running labs,
Mininet + BMv2 for a topology (``mininet``), failures on a running lab (``faults``),
deploying jobs on it (``deploy``), the watcher beside blocking code, torchrun on
its hosts (``ranks``) and the demo. The measurements on it live in ina.bench."""
