"""Drives the product from outside, as the tests and the benchmarks both do: the app as a process,
database outages, hostile uploads, formula payloads. It may import the product; nothing in the
product imports it, and it imports neither the tests nor bench."""
