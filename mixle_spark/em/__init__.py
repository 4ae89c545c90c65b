"""The EM driver and the services of its loop.

``estimation.optimize`` / ``best_of`` / ``initialize`` (and ``model_selection.select_k``) are the public
face; this package is what they run:

- :mod:`~mixle_spark.em.options`: :class:`FitOptions`, the one options object from the API to the
  loop, each option checked there;
- ``_run``: one fit (:class:`EMRun`, made from the handle, the estimator, the FitOptions and the
  :class:`FitInputs`): start (:mod:`~mixle_spark.em.seeding`), iterate, stop, the
  degenerate-component policy, the trace, and its checkpoints through the ``Checkpointer`` it holds;
  ``_records``: its records and stopping rules;
- ``_lockstep`` and ``_shared_passes``: several fits advancing together, one pass over the data each
  step (``best_of`` trials, ``select_k`` candidates);
- :mod:`~mixle_spark.em.seeding` and ``_seeding_passes``: the k-means|| start;
- services: :mod:`~mixle_spark.em.observability` (the per-iteration trace, rank receipts),
  :mod:`~mixle_spark.em.resilient` (checkpointed fits: the ``Checkpointer``; ``_checkpoint_store``),
  :mod:`~mixle_spark.em.sdc_audit` (silent-corruption audit).

It reaches the data only through the encoded-data contract
(:mod:`mixle_spark.parallel.backends.contract`).
"""
