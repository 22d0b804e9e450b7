"""Run a function in a forked child, as the worker runs tools, and bring back its result.

Tools that spawn processes make their caller a child subreaper; doing that to the pytest process
itself would re-parent every orphan of the test session to it, so those tests fork first.
"""

from __future__ import annotations

import os
import pickle
import traceback
from collections.abc import Callable
from typing import Any


class ForkedError(Exception):
    """The function raised in the child; carries the child's traceback text."""


def run_in_fork(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` in a forked child; return its value or raise its error."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(read_end)
            try:
                payload = pickle.dumps(("ok", fn(*args, **kwargs)))
            except BaseException as exc:  # the child reports everything, including asserts
                payload = pickle.dumps(
                    ("err", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
                )
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as src:
        data = src.read()
    os.waitpid(pid, 0)
    if not data:
        raise ForkedError("the forked child died without a result")
    kind, value = pickle.loads(data)
    if kind == "err":
        raise ForkedError(value)
    return value
