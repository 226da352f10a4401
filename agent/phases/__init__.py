"""A qualification's phases in order (qualification.py) and the ones that are more than a
function: sustained.py, edge_shapes.py, coload.py; workers.py runs a phase's worker beside
the contention sampler."""
