"""The ``edgequal`` command line: the argparse tree (parser.py), ``main`` (main.py), the
options every device command shares (device_args.py) and one module per command group.

A command module imports device_args.py and the library modules it calls, never main.py or
parser.py; main.py imports a command module only when that command runs."""
