"""Tracer values by family: each module registers the operations of its kinds in
table.VALUE_OPS (see table.py); families.py imports them all."""
