"""Analysis of reuse_ray Parquet results with pandas and pyarrow only (never imports Ray).

``load`` reads one run, one sweep or many sweeps (local paths or pyarrow filesystem URIs);
``tables`` builds the paper's tables with paired statistics; ``plots`` draws the figures;
``report`` writes a Markdown/HTML report with both.
"""

from .load import AnalysisError, Results, load
from .report import write_report

__all__ = ["AnalysisError", "Results", "load", "write_report"]
