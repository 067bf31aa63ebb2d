"""Lifetime prediction (FuncStore Sec. III-C2): feature datasets from recorded
runs, a torch MLP (3 hidden layers of 64, ReLU) trained per workflow category,
and a light predictor for serving that needs no torch. Not yet built."""

from __future__ import annotations

__all__: list[str] = []
