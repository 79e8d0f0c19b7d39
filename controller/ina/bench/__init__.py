"""Measurements: one module per benchmark (``inabench COMMAND``), the simulation at
scale, and the processes they start on a lab's hosts. On top of the emulation
(ina.lab), which never imports them."""
