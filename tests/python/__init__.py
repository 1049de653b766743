"""Tests of the Python binding; run with tap.py or `make python`."""
