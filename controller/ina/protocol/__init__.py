"""What travels on the wire and what the data plane computes, in Python: constants
shared with the P4 program (and the generator of its included files), BIER bitmaps,
the INA header and its array, frames as the P4 parser sees them, the lane
arithmetic, 32-bit wrap-around. Depends on nothing else in ``ina``."""
