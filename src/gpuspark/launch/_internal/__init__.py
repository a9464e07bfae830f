"""Private to :mod:`gpuspark.launch`: may change without notice.

- :mod:`~gpuspark.launch._internal.agent`: one node of a job, torch's elastic agent and its
  ranks, run inside a barrier task (or in the caller's process in local mode);
- :mod:`~gpuspark.launch._internal.worker`: what runs inside each rank process;
- :mod:`~gpuspark.launch._internal.logs`: rank lines and failure reports streamed to the driver.
"""
