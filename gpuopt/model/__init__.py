"""The profile document as typed records, and its JSON edge (see docs/architecture.md)."""
