"""Generic helpers every package may use, importing nothing of gpuspark but its errors.

- :mod:`.net`: a free TCP port, and the one HTTP GET helper (timeout, retry) every client
  of a web API uses (Spark's master page, Prometheus, YARN, Kubernetes);
- :mod:`.procs`: background processes in their own process groups, liveness, stopping;
- :mod:`.yamltext`: YAML text that reads like hand-written files;
- :mod:`.numbers`: small integer arithmetic shared by the planners of shards and windows;
- :mod:`.extras`: the extras of ``pip install 'gpuspark[...]'`` and the one way to import
  their libraries (a missing one is a one-line error naming the extra).
"""
