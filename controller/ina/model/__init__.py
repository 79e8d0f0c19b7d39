"""The reference model of the data plane: p4src/ in plain Python, file by file
(``pipeline``: one module per P4 control file, of the same name), switch by switch
(``switch``: the pipeline in ina.p4's order), wired into a network (``network``);
``harness`` runs the controller, workers and server roots on it (the tests' oracle,
the demo without BMv2). ``pipeline``, ``switch`` and ``network`` depend on
``ina.control`` for the entries they execute and on ``ina.protocol``; only
``harness`` reaches the host side."""
