"""Imports of what GPU users already have, as commscope profiles and results-store records.

- :mod:`.kineto`, :mod:`.trace_steps`, :mod:`.trace_profile`, :mod:`.trace_comms`: PyTorch profiler (Kineto)
  Chrome traces to a ``ModelProfile`` (per-module forward and backward time, gradient bytes, optimizer step) and
  collective records (NCCL kernels with their sizes, gloo ops); :mod:`.trace_compare`: a trace beside the
  predicted timeline of a schedule (``commscope compare-trace``).
- :mod:`.nccl_tests_json`: nccl-tests' ``-J`` JSON output, with ``-I`` per-iteration timings and stragglers.
- :mod:`.nccl_inspector`: NCCL Inspector (profiler plugin) JSON lines.
- :mod:`.deepspeed_comms`: DeepSpeed ``comms_logger`` summaries (``log_summary()`` / ``log_all()`` tables).
- :mod:`.common`: reading files, op and dtype names, imported records (``origin: imported``), stragglers.

Every parser reads the documented format directly (``json`` and regular expressions, no other dependency);
each module's docstring names its sources.
"""
