"""Results: the declared Parquet schema, the writer, the reader and where results live."""

from .reader import ResultsError, read_table
from .schema import ATTEMPT_COLUMNS, RUN_TABLES, SCHEMAS, TABLES, TIMING_COLUMNS
from .storage import Storage
from .writer import RunWriter, rows_to_table

__all__ = [
    "RUN_TABLES",
    "SCHEMAS",
    "TABLES",
    "TIMING_COLUMNS",
    "ATTEMPT_COLUMNS",
    "ResultsError",
    "RunWriter",
    "Storage",
    "read_table",
    "rows_to_table",
]
