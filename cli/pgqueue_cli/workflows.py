"""Issue 27 in the CLI: ``workflow:show``'s steps and ``workflow:list``'s table, as text or JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pgqueue_cli.render import table


def _moment(value: Any) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def _duration(step: dict[str, Any]) -> str:
    started, ended = step.get("started_at"), step.get("ended_at")
    if started is None or ended is None:
        return "-"
    return f"{(ended - started).total_seconds():.3g}s"


def _outcome(step: dict[str, Any]) -> str:
    if step["error"]:
        return str(step["error"])
    if step["state"] == "waiting":
        if step["kind"] == "signal":
            return f"awaits signal {step['signal']!r}" + (f" until {_moment(step['wake_at'])}" if step["wake_at"]
                                                          else "")
        if step["kind"] == "sleep":
            return f"until {_moment(step['wake_at'])}"
        if step["kind"] == "child":
            return f"awaits job {step['child_id']}"
    shown = json.dumps(step["result"])
    return shown if len(shown) <= 80 else shown[:77] + "..."


def steps_text(workflow_id: str, steps: list[dict[str, Any]]) -> str:
    """``workflow:show``: one line per step (seq, name, kind, state, runs, duration, result or error)."""
    if not steps:
        return f"workflow {workflow_id}: no steps recorded (not started, unknown, or its steps were pruned)"
    headers = ["SEQ", "NAME", "KIND", "STATE", "RUNS", "DURATION", "RESULT / ERROR"]
    return f"workflow {workflow_id}\n" + table(headers, [
        [str(s["seq"]), s["name"], s["kind"], s["state"], str(s["attempts"]), _duration(s), _outcome(s)]
        for s in steps])


def steps_data(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``workflow:show --json``: the steps, times as ISO 8601, durations in seconds."""
    return [{**s, "started_at": _moment(s["started_at"]), "ended_at": None if s["ended_at"] is None
             else _moment(s["ended_at"]), "wake_at": None if s["wake_at"] is None else _moment(s["wake_at"]),
             "child_id": None if s["child_id"] is None else str(s["child_id"]),
             "duration": None if s["ended_at"] is None else (s["ended_at"] - s["started_at"]).total_seconds()}
            for s in steps]


def list_text(found: list[dict[str, Any]]) -> str:
    """``workflow:list``: one line per live workflow."""
    if not found:
        return "no live workflows"
    headers = ["ID", "NAME", "STATE", "STEP", "WAKES", "AWAITS", "ATTEMPTS"]
    return table(headers, [[
        str(w["id"]), w["name"], w["state"], "-" if w["step_seq"] is None else f"{w['step_seq']}. {w['step_name']}",
        _moment(w["wake_at"]), w["awaited_signal"] or ("-" if w["awaited_child"] is None else str(w["awaited_child"])),
        str(w["attempts"])] for w in found])


def list_data(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``workflow:list --json``: ids as strings, times as ISO 8601."""
    return [{k: (str(v) if k in ("id", "awaited_child") and v is not None else
                 _moment(v) if isinstance(v, datetime) else v) for k, v in w.items()} for w in found]
