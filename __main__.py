"""``python -m gatepack``: the command line."""

from gatepack.cli import main

main(prog_name="gatepack")
