"""The load progress bar that :class:`ember.Engine` draws on stderr while a model loads (``progress=True``, or by
default when stderr is a terminal), with the standard library alone: one line, redrawn in place with a carriage
return when the whole percentage changes, ended with a newline when the load ends, whichever way it ends."""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any, Mapping, Optional

#: The longest the bar itself may be, in characters; it shrinks to fit a narrow terminal.
_MAX_BAR = 40
_MIN_BAR = 10


def model_label(config: Any) -> str:
    """How the bar names what loads: a file path's file name, or a model name as written (``org/repo:Q4_1``)."""
    if isinstance(config, (str, bytes)):
        try:
            config = json.loads(config)
        except ValueError:
            config = None  # ember refuses it, with its reason
    model = config.get("model") if isinstance(config, Mapping) else None
    model = model if model is not None else os.environ.get("EMBER_MODEL")
    if model is None:
        return "the default model"
    text = os.fspath(model) if isinstance(model, os.PathLike) else str(model)
    return os.path.basename(text) if text.endswith(".gguf") else text


def wanted(progress: Optional[bool]) -> bool:
    """``progress`` ``True`` or ``False`` as given; ``None``: when stderr is a terminal."""
    if progress is not None:
        return progress
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


class LoadBar:
    """Called with each fraction loaded (0 to 1); :meth:`close` ends the line if the load stopped short."""

    def __init__(self, label: str) -> None:
        self.prefix = f"ember: loading {label} "
        self.percent: Optional[int] = None
        self.open = False

    def __call__(self, fraction: float) -> None:
        percent = max(0, min(100, int(fraction * 100)))
        if percent == self.percent:
            return
        self.percent = percent
        width = shutil.get_terminal_size(fallback=(80, 24)).columns
        bar = max(_MIN_BAR, min(_MAX_BAR, width - len(self.prefix) - 8))
        filled = bar * percent // 100
        line = f"\r{self.prefix}[{'#' * filled}{'.' * (bar - filled)}] {percent:3d}%"
        stream = sys.stderr
        stream.write(line + ("\n" if percent == 100 else ""))
        stream.flush()
        self.open = percent != 100

    def close(self) -> None:
        if self.open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.open = False
