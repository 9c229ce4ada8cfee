"""Results: the declared Parquet schema, the atomic writer and the reader."""

from .reader import ResultsError, read_table
from .schema import RUN_TABLES, SCHEMAS, TABLES, TIMING_COLUMNS
from .writer import RunWriter, rows_to_table, table_path, write_atomic

__all__ = [
    "RUN_TABLES",
    "SCHEMAS",
    "TABLES",
    "TIMING_COLUMNS",
    "ResultsError",
    "RunWriter",
    "read_table",
    "rows_to_table",
    "table_path",
    "write_atomic",
]
