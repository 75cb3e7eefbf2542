from electra.cli import entry

entry()
