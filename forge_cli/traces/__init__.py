"""Trace records: the ``CallRecord`` schema, the SQLite store, JSONL/Parquet export.

``record``, ``store`` and ``writer`` are stdlib-only (the proxy's writer process runs them inside
mitmproxy's virtual environment); ``export`` needs pyarrow for Parquet.
"""
