"""``commscope validate``: measure, fit, profile, train every technique, predict it, compare.

    commscope validate --suite quick --ranks 4 --out DIR [--emulate 100mbit,1gbit,2500mbit]

For each environment (the host as it is, or an emulated cluster of ``--ranks`` nodes with one rank
each behind a link of the given rate), one torchrun job (:mod:`runners.validate.rank`) sweeps the
collectives, fits the environment, profiles the model on all ranks at once and trains each
technique of the suite. Then every technique's iteration time is predicted with ``costmodels``
from *that* fitted environment and *that* measured profile, and compared with the measurement.

DIR receives, per environment, ``<env>/records.jsonl`` (sweep, environment, profile and iteration
records), ``<env>/environment.json``, ``<env>/profile.json``, ``<env>/plan.json`` and
``<env>/log.txt``; and for the whole run ``validation.jsonl`` (one "validation" record per
technique and environment), ``validation.csv`` and ``validation.md`` (technique, environment, p,
predicted, measured, error; then the median and max error). Nothing in DIR is overwritten: a
DIR that already holds a validation is refused.

What "measured" is (:func:`runners.training.pricing.measured_time`): the period a schedule predicts. For
techniques that communicate every iteration, the median over timed iterations of the mean over ranks of each
rank's step (the maximum over ranks exceeds the period when the ranks' step boundaries drift, as ByteScheduler's
do); for ``local_sgd`` (communicates every H-th) the wall-clock time of the timed loop over whole periods divided
by the iterations, which is what its schedule predicts (amortised time per iteration).

Here: the suites and plans (:mod:`.suite`), the driver (:mod:`.driver`), prediction beside measurement
(:mod:`.prediction`), the report (:mod:`.report`) and the rank side of each job (:mod:`.rank`).
"""

from runners.training.pricing import PERIODIC, predict_many, schedule_call

from .driver import run_job, validate
from .prediction import compare, measured_time, predict
from .report import markdown, regime_name, regimes, summary, table_rows, technique_label, winners, write_tables
from .suite import EXACT, LATENCY_BYTES, SUITES, Suite, ValidationError, env_label, job_command, make_plan

__all__ = ["EXACT", "LATENCY_BYTES", "PERIODIC", "SUITES", "Suite", "ValidationError", "compare", "env_label",
           "job_command", "make_plan", "markdown", "measured_time", "predict", "predict_many", "regime_name",
           "regimes", "run_job", "schedule_call", "summary", "table_rows", "technique_label", "validate", "winners",
           "write_tables"]
