"""The worker process and what drives it: main.py (``python -m edgequal.agent.worker``: one
job in, events out), io.py (event stream, runtime loading, inputs), scenarios.py (service
scenario jobs), jobs.py (the typed job), supervisor.py (starts and watches one worker) and
loadgen.py (co-load loops). Runtimes are imported only inside the worker process."""
