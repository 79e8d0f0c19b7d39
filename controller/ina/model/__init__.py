"""The reference model of the data plane: p4src/ in plain Python, switch by switch
(``switch``), wired into a network (``network``); ``harness`` runs the controller,
workers and server roots on it (the tests' oracle, the demo without BMv2).
``switch`` and ``network`` depend on ``ina.control`` for the entries they execute
and on ``ina.protocol``; only ``harness`` reaches the host side."""
