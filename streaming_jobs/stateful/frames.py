"""pandas <-> epoch milliseconds, for the jobs' stateful processors (transformWithState)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: importing pandas takes 0.3 s or more, and
    # Spark imports this module at every start of a keyed-state query (its processor's init)
    import pandas as pd


def epoch_ms(times: pd.Series) -> np.ndarray:
    """Epoch milliseconds of a timestamp column (naive UTC or tz-aware alike)."""
    if len(times) == 0:
        return np.array([], dtype=np.int64)
    if getattr(times.dtype, "tz", None) is not None:
        times = times.dt.tz_convert("UTC").dt.tz_localize(None)
    return times.to_numpy(dtype="datetime64[ms]").astype(np.int64)


def timestamps(ms) -> pd.Series:
    """UTC timestamps from epoch milliseconds (Spark reads them as TIMESTAMP)."""
    import pandas as pd

    return pd.Series(pd.to_datetime(np.asarray(ms, dtype=np.int64), unit="ms", utc=True))
