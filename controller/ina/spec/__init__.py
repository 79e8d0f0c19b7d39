"""What the operator writes: the topology file (switches, hosts, links, routes), job
files (workers, root, VAT) and their validation, BIER forwarding tables derived from
the topology, and generated fabrics. Depends on ``ina.protocol``."""
