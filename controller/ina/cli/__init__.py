"""The command-line programs, one module per command: inactl, inaworker, inalab,
inaroot, inabench, and the baselines the benchmark starts on hosts. Only they
print and choose exit codes (``ina.cli.common``)."""
