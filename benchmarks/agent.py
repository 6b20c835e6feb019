"""A producer in a venv of its own: ``python -m benchmarks.agent SYSTEM DSN VARIANT [--install]``.

oban (Python >= 3.12) and pgqueue@<rev> (another revision's library) cannot be imported by the
harness, so their schema install and their producers run here, in the system's own interpreter
(benchmarks/peers.py), and the harness drives them through a pipe: one JSON request per line on
stdin, one JSON answer per line on stdout. Timed loops (``singles``, ``bulks``) are timed here,
so the pipe costs nothing to the figure; only the wake-up and delayed-job sections send one job
per request, and they time from the commit, which this process stamps.

Requests: ``{"op": "single", "seq": n}`` -> ``{"at": commit epoch}``; ``{"op": "bulk", "seqs": [...]}``;
``{"op": "delayed", "seq": n, "due": epoch}``; ``{"op": "singles", "seqs": [...]}`` and
``{"op": "bulks", "chunks": [[...], ...]}`` -> ``{"elapsed": seconds}``; ``{"op": "quit"}``.
An answer ``{"error": "..."}`` says a request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import traceback
from collections.abc import AsyncIterator
from typing import Any


class AgentProducer:
    """The harness's side: a Producer whose calls are requests to an agent subprocess."""

    def __init__(self, proc: asyncio.subprocess.Process, system: str) -> None:
        self.proc = proc
        self.system = system
        self.lock = asyncio.Lock()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, system: str, dsn: str, variant: str, install: bool = False
                   ) -> AsyncIterator[AgentProducer]:
        """Start the agent of ``system`` (installing its schema first if ``install``); stop it by PID after."""
        from benchmarks.peers import interpreter_for

        interpreter = interpreter_for(system)
        args = [interpreter.python, "-m", "benchmarks.agent", system, dsn, variant]
        if install:
            args.append("--install")
        proc = await asyncio.create_subprocess_exec(*args, cwd=interpreter.cwd, env=interpreter.environment(),
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=None, limit=2**24)
        agent = cls(proc, system)
        try:
            await agent._answer("ready")
            yield agent
            await agent.request({"op": "quit"})
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def _answer(self, what: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.system} agent (PID {self.proc.pid}) exited before answering {what}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the {self.system} agent failed on {what}: {answer['error']}")
        return answer

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        async with self.lock:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            await self.proc.stdin.drain()
            return await self._answer(str(message.get("op")))

    async def single(self, seq: int) -> float:
        return float((await self.request({"op": "single", "seq": seq}))["at"])

    async def bulk(self, seqs: list[int]) -> None:
        await self.request({"op": "bulk", "seqs": seqs})

    async def delayed(self, seq: int, due_at: float) -> None:
        await self.request({"op": "delayed", "seq": seq, "due": due_at})

    async def singles(self, seqs: list[int]) -> float:
        return float((await self.request({"op": "singles", "seqs": seqs}))["elapsed"])

    async def bulks(self, chunks: list[list[int]]) -> float:
        return float((await self.request({"op": "bulks", "chunks": chunks}))["elapsed"])


async def serve(system: str, dsn: str, variant: str, install: bool) -> None:
    """The agent's side: answer requests with the system's local producer until ``quit``."""
    from benchmarks.systems import install_local, local_producer

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(answer: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()

    if install:
        await install_local(system, dsn)
    async with local_producer(system, dsn, variant) as p:
        say({"ready": True})
        while line := await reader.readline():
            message = json.loads(line)
            op = message["op"]
            try:
                if op == "quit":
                    say({})
                    return
                if op == "single":
                    say({"at": await p.single(int(message["seq"]))})
                elif op == "bulk":
                    await p.bulk([int(s) for s in message["seqs"]])
                    say({})
                elif op == "delayed":
                    await p.delayed(int(message["seq"]), float(message["due"]))
                    say({})
                elif op == "singles":
                    say({"elapsed": await p.singles([int(s) for s in message["seqs"]])})
                elif op == "bulks":
                    say({"elapsed": await p.bulks([[int(s) for s in c] for c in message["chunks"]])})
                else:
                    say({"error": f"unknown request {op!r}"})
            except Exception as exc:  # the harness reports it with the request that failed
                traceback.print_exc(file=sys.stderr)
                say({"error": f"{type(exc).__name__}: {exc}"})


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent")
    parser.add_argument("system")
    parser.add_argument("dsn")
    parser.add_argument("variant")
    parser.add_argument("--install", action="store_true", help="install the system's schema first")
    args = parser.parse_args()
    asyncio.run(serve(args.system, args.dsn, args.variant, args.install))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
