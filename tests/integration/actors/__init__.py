"""Integration tests of the hardened Thespian substrate, on real multiprocTCPBase systems."""
