"""The ``edgequal`` command line: the top of the argparse tree (parser.py), ``main``
(main.py), the options every device command shares (device_args.py) and one module per
command group, each holding its commands' flags (``add_parsers``) beside their code.

A command module imports device_args.py at its top, and the library modules it calls only
inside its functions, never main.py or parser.py: building the tree for ``--help`` imports
no third-party package (tests/test_imports.py)."""
