"""A warm `electra` for the docs tests: every `electra ...` line of a runnable block is a
fork of one process that has already imported what a command imports.

Each `electra` process starts by importing torch (3.3 s on the family 23 model 1 EPYC),
``torch._dynamo`` (3 s more: ``torch.optim`` imports it when an optimizer is built) and,
for an export, transformers; the docs' blocks run about 75 commands, so the imports were
about half of the docs tests' time. Here one server per test process imports them once
(:func:`serve`); the `electra` on the blocks' ``PATH`` is a stdlib-only client
(:data:`CLIENT`) that hands the server its arguments, folder, environment and its stdin,
stdout and stderr, and exits with the code of a forked child that runs
``electra.cli.main`` on them, as the real `electra` script does. Output, exit codes, files
and subprocesses (torchrun, a prepare's worker processes) are those of a real command.
``ELECTRA_DOCS_COLD=1`` runs the blocks with the real `electra` instead.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = """#!{python} -S
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["ELECTRA_WARM_SOCKET"])
socket.send_fds(s, [b"r"], [0, 1, 2])
s.sendall(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(),
                      "env": dict(os.environ)}}).encode())
s.shutdown(socket.SHUT_WR)
reply = b""
while chunk := s.recv(64):
    reply += chunk
sys.exit(int(reply) if reply else 1)  # no reply: the child died (a signal), as a crash
"""


def _preload() -> None:
    """What the commands import: torch, dynamo, every electra module, transformers."""
    import importlib
    import pkgutil

    import torch._dynamo  # noqa: F401

    import electra

    for mod in pkgutil.walk_packages(electra.__path__, "electra."):
        if not mod.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(mod.name)
    try:
        import transformers

        for name in ("ElectraConfig", "ModernBertConfig", "DebertaV2Config",
                     "ElectraForPreTraining", "AutoTokenizer"):
            getattr(transformers, name)
    except ImportError:
        pass


def _child(conn: socket.socket, fds: list[int], request: dict) -> None:
    """Run one command in this forked child with the client's stdio, folder and environment."""
    import signal
    import traceback

    from electra.cli import main

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores its children
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["electra", *request["argv"]]
    code = 1
    try:
        code = main(request["argv"]) or 0
    except SystemExit as err:  # argparse's exit on a usage error, --help
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
        if isinstance(err.code, str):
            print(err.code, file=sys.stderr)
    except BaseException:  # as Python prints an uncaught error
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(str(code).encode())
        finally:
            os._exit(code)


def serve(path: str) -> None:
    import signal

    _preload()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
        if os.fork() == 0:
            server.close()
            _child(conn, fds, json.loads(data))
        for fd in fds:
            os.close(fd)
        conn.close()


_STARTED: dict[str, str] = {}


def warm_bin() -> tuple[list[str], dict[str, str]]:
    """The folder to put first on a shell's ``PATH`` and the environment to add, so that its
    `electra` is this process's warm server (started on first use, stopped when the process
    exits); nothing under ``ELECTRA_DOCS_COLD=1``."""
    if os.environ.get("ELECTRA_DOCS_COLD"):
        return [], {}
    if not _STARTED:
        folder = Path(tempfile.mkdtemp(prefix="electra-warm-"))
        (folder / "bin").mkdir()
        client = folder / "bin" / "electra"
        client.write_text(CLIENT.format(python=sys.executable))
        client.chmod(0o755)
        sock = str(folder / "s")
        proc = subprocess.Popen([sys.executable, __file__, sock], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # runs after the kill
        atexit.register(proc.kill)
        ready, _, _ = select.select([proc.stdout], [], [], 300)  # its imports: 5-15 s
        line = proc.stdout.readline() if ready else ""
        assert line.strip() == "ready", \
            f"the warm electra server did not start in 300 s (exit {proc.poll()})"
        _STARTED.update(PATH=str(folder / "bin"), ELECTRA_WARM_SOCKET=sock)
    return [_STARTED["PATH"]], {"ELECTRA_WARM_SOCKET": _STARTED["ELECTRA_WARM_SOCKET"]}


if __name__ == "__main__":
    serve(sys.argv[1])
