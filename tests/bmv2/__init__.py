"""The p4c and Mininet + BMv2 test tiers, and their helpers (``bmv2.bmv2lab``)."""
