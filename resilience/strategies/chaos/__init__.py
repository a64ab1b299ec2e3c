"""Chaos (Simmy): fault, latency, outcome and behaviour injection."""
