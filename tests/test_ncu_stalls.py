"""``benchmarks/ncu_stalls.py``: the per-instruction stall listing parsed from ncu's CSV."""

import gzip
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import ncu_stalls

LISTING = """==PROF== Connected to process 1
program output, not CSV
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"00007f0000000000","LDS.128 R4, [R2]","12","10"
"00007f0000000010","FFMA R5, R4, R6, R5","1,250","1,200"
"00007f0000000020","SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3","300","290"
"00007f0000000030","EXIT","",""
"""


def test_parse_reads_every_instruction_in_order_with_thousands_separators():
    ins = ncu_stalls.parse_source_csv(LISTING)
    assert [i.samples for i in ins] == [12, 1250, 300, 0]
    assert ins[2].source.startswith("SYNCS.PHASECHK")
    assert [i.index for i in ins] == [0, 1, 2, 3]


def test_top_stalls_orders_by_samples():
    ins = ncu_stalls.parse_source_csv(LISTING)
    assert [i.address[-2:] for i in ncu_stalls.top_stalls(ins, 2)] == ["10", "20"]


def test_missing_samples_column_is_a_clear_error():
    with pytest.raises(ValueError, match="Warp Stall Sampling"):
        ncu_stalls.parse_source_csv('"Address","Source"\n"0","NOP"\n')
    with pytest.raises(ValueError, match="no header"):
        ncu_stalls.parse_source_csv("==PROF== nothing profiled\n")


@pytest.mark.parametrize("gzipped", [False, True])
def test_main_prints_shares_and_context(tmp_path, capsys, gzipped):
    path = tmp_path / ("src.csv.gz" if gzipped else "src.csv")
    if gzipped:
        with gzip.open(path, "wt") as f:
            f.write(LISTING)
    else:
        path.write_text(LISTING)
    ncu_stalls.main([str(path), "--top", "1", "--context", "1"])
    out = capsys.readouterr().out
    assert "4 instructions, 1562 samples" in out
    assert "80.0%" in out and "LDS.128 R4, [R2]" in out
