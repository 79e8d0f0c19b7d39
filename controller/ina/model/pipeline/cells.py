"""cells.p4: a VAT node's state on this switch, which Aggregation (aggregation.py)
and Calls (calls.py) share, and what both do with it."""

from __future__ import annotations

from dataclasses import dataclass

from ina.control.entities import TableEntry
from ina.control.memory_switch import MemorySwitch
from ina.model.pipeline.metadata import Meta
from ina.protocol.constants import BITSTRING_BITS, LANES, JobStat

BM_MASK = (1 << BITSTRING_BITS) - 1

# Register names of the aggregation state.
REG_CELLS = "cells"
REG_SETS = "set_bitmaps"
REG_PROGRESS = "progress"  # per job index, at its root: (epoch, highest completed seq)
REG_LANES = tuple(f"lane{i}" for i in range(LANES))  # lanes.p4


@dataclass(frozen=True)
class CellState:
    """One cell's scalars, packed in one register on the switch (aggregation.p4):
    the round it holds (epoch of the job entry, sequence number), a generation
    that tags its per-set bitmaps, the round's element count and op, the
    overflow flag, how many BIER sets are full, and the bitmap of a node that
    lies in one set (a root spanning sets keeps a bitmap per set instead); the
    round's element width and whether it holds an array (a contribution with
    data came; else only NODATA ones); and whether any contribution carried a
    congestion mark (Ecn.CE)."""

    epoch: int = 0
    seq: int = 0
    gen: int = 0
    count: int = 0
    op: int = 0
    overflow: bool = False
    done: int = 0
    bitmap: int = 0
    width: int = 0
    data: bool = False
    ce: bool = False
    #: Below the root: the cell's lanes hold the round's result, kept as it passed
    #: down (its P-BM in ``bitmap``), for its workers' retransmissions.
    kept: bool = False


EMPTY_CELL = CellState()


def open_cell(store: MemorySwitch, job: TableEntry, seq: int) -> tuple[int, CellState]:
    """The cell of ``seq`` in ``job``'s 2W cells from 2 * slot_base on (s and s + W
    share a slot), and what it holds."""
    window = job.param("slot_mask") + 1
    cell = 2 * job.param("slot_base") + (seq & (2 * window - 1))
    return cell, store.reg_read(REG_CELLS, cell, EMPTY_CELL)


def refuse(meta: Meta, stat: JobStat) -> None:
    """A packet a job check refused: counted for its job (stat), then dropped."""
    meta.job_events.add(stat)
    meta.consumed = True
