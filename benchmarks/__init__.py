"""Benchmark harness for the layer planner: speed, plan quality, size prediction, rebuild cost.

Not part of the test suite's pass/fail: `nox -s bench` runs it and writes benchmarks/REPORT.md.
"""
