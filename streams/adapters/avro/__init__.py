"""Avro on the wire: schemas generated from the domain types, and registry-backed serde."""
