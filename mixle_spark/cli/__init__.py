"""The command-line jobs' shared code.

:mod:`~mixle_spark.cli.fit` is the fit job (``jobs/em_fit.py``, ``python -m mixle_spark.cli.fit``, and
the same job under ``mpiexec`` / ``torchrun`` with ``--backend mpi`` / ``torchrun``), and
:mod:`~mixle_spark.cli.update` its ``--update-from`` mode (new rows folded into a fitted model);
``_common`` holds what every job shares (exit codes, one-line errors and the translation of Spark
failures, atomic output directories, the job's Spark session); ``_arguments`` is the fit job's command
line (``_update_arguments`` its ``--update-from`` flags), ``_inputs`` its input opened for the backend
and its warnings reported, ``_summary`` its summary.json schema, and ``_spmd`` runs a job as several
processes. ``_early`` checks a local input's schema against the model before Spark starts,
``_fixes`` says the fix in a job's error line, and ``_watch`` prints lines while encoding and seeding
run long.
"""
