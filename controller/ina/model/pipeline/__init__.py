"""The model's data plane, p4src/include file by file: each P4 control is a class of
the same name in the module of the same stem (aggregation.p4's ``Aggregation`` in
``aggregation.py``), with the control's actions as its methods where the model has
them; files of shared state and actions, too (cells.p4: ``cells.py``).
``ina.model.switch.ModelSwitch`` applies them in the order ingress.p4 and
egress.p4 do.

Besides: ``metadata`` is headers.p4's metadata_t, ``tables`` the store every
control reads its tables from. No module mirrors the files that declare only the
packet's formats, or what the model does not need to compute step by step (the
reasons in tests/test_model_mirror.py): parser.p4, deparser.p4, headers.p4 and
bier_push.p4 are ``ina.protocol.frames``; defs.p4 and generated.p4 (generated from it) are
``ina.protocol.constants``, a cell's fields ``cells.CellState``; lanes.p4 (generated
too) and lane_math.p4 are ``cells.REG_LANES`` and ``ina.protocol.lanes``; verify_checksum.p4 and
compute_checksum.p4 are the IPv4 checksum in ``ina.protocol.frames``."""
