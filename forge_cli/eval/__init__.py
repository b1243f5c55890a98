"""``forge eval``'s pure pieces: metrics over trials, the JSON / HTML / terminal reports, and run comparison.

The ``forge eval`` command runs every task K times through a rollout session and hands the finished trials
to these modules; nothing here runs rollouts, talks to a model or reads the trace store.

- :mod:`forge_cli.eval.metrics`: pass@k, pass^k (both definitions), mean score, per task / category / overall,
  with 95% confidence intervals (bootstrap over tasks, Wilson over trials).
- :mod:`forge_cli.eval.report`: ``write_reports`` (``eval.json`` + one self-contained ``report.html``) and
  ``render_table`` (rich table, plain text when the console is not a terminal).
- :mod:`forge_cli.eval.html`: the HTML page and its inline SVG chart.
- :mod:`forge_cli.eval.compare`: ``compare`` two runs' ``eval.json`` (B minus A) and ``render_comparison``.
"""
