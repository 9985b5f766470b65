"""Helpers shared by the bench scripts that turn JSON summaries into markdown
tables (bench/pareto_table.py, bench/pattern_table.py, bench/seed_table.py)."""
import json
import math


def load(path):
    """The JSON at path, or None when missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def num(v):
    """A finite float or None."""
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def fmt(v, spec=".3f", none="-"):
    """v formatted, or none."""
    return none if v is None else format(v, spec)


def ratio(a, b):
    """a / b, or None."""
    return a / b if a is not None and b else None


def dense_engine(deploy, prec="fp16"):
    """The dense engine entry of that precision in deploy's summary, or {}."""
    for e in deploy.get("dense_engine", []) if deploy else []:
        if e.get("precision") == prec:
            return e
    return {}
