"""Contracts for distributed gradient training (the reference API's training names).

:mod:`~mixle_spark.parallel.training.contracts` (process mesh, parallel plans, capabilities, step
receipts, the training-backend registry) and :mod:`~mixle_spark.parallel.training.launchers` (Lightning
Fabric and Ray Train launchers, worker-topology attestation); ``_records`` holds their value types.
EM fits do not use them; they describe what a gradient-training backend must provide.
"""
