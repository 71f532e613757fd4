"""tools/test_times.py: a test whose CPU is unknown is counted as such, never as zero."""

from __future__ import annotations

import test_times

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.a" name="test_known" time="10.0">
  <properties><property name="cpu_seconds" value="4.0"/></properties></testcase>
<testcase classname="tests.a" name="test_lost" time="6.0">
  <properties><property name="cpu_unknown" value="java (pid 7) left the tree running"/>
  </properties></testcase>
<testcase classname="tests.b" name="test_busy" time="5.0">
  <properties><property name="cpu_seconds" value="5.0"/></properties></testcase>
</testsuite></testsuites>
"""


def test_an_unknown_cpu_is_left_out_of_the_sums_and_counted(tmp_path, capsys):
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    assert test_times.main([str(report), "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "their CPU (workers, their JVMs, what they started): 9 s, 1 tests' CPU unknown" in (
        "\n".join(lines)
    )
    [a] = [line for line in lines if line.endswith("tests/a.py  (1 CPU unknown)")]
    # 16 s of wall, 4 s of CPU over the 10 s of the test it is known for
    assert a.split()[:4] == ["16.0", "76.2%", "4.0", "0.40"]
    [b] = [line for line in lines if line.endswith("tests/b.py")]
    assert b.split()[:4] == ["5.0", "23.8%", "5.0", "1.00"]
    [lost] = [line for line in lines if line.endswith("tests/a.py::test_lost")]
    assert lost.split()[:2] == ["6.0", "unknown"]
