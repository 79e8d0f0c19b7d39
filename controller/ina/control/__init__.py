"""The control plane: the P4 program's names, the entities a switch holds (base state
and each job's), resource allocation, VAT planning, and the controller that
deploys jobs over any ``SwitchClient`` (P4Runtime, or an in-memory switch).
Depends on ``ina.spec`` and ``ina.protocol``."""
