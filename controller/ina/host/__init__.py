"""What runs on hosts: the worker library (calls, windows, retransmission), float32
quantization, a server as VAT root, the host-based baselines (parameter server,
ring) and the arrays the CLIs and benchmarks share. Depends on ``ina.protocol``
and ``ina.spec``."""
