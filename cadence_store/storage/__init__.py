"""The storage layer: the tables, their statements, the engines' backends, schema and engines.

It knows SQL and the two engines, and nothing of runs' rules beyond the rows; the layers
above (`repository`, then `store`) import it, never the other way round.
"""
