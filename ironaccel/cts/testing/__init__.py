"""Helpers for testing code that sits on the ironaccel API without a GPU: ``memdevice.MemDevice``, an
in-memory device whose deferred, lazily-run streams make missing fences fail reliably."""
