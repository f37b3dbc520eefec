"""The batch wing: execute the notebooks with papermill as tasks of a grid, on one executor.

One job per module:

- :mod:`~ofl_core.batch.tasks`: a task (notebook + parameters), its run id and outputs, grid
  files, parameter checks, :class:`~ofl_core.batch.tasks.TaskSpec` (what a worker gets);
- :mod:`~ofl_core.batch.execute`: executing one task (papermill, the sidecar JSON, figures),
  in this process or in a child process with its threads, GPUs and wall-clock limit;
- :mod:`~ofl_core.batch.config`: :class:`~ofl_core.batch.config.ExecutorConfig` and its layers;
- :mod:`~ofl_core.batch.executors`: local / inline / Dask / submitit executors;
- :mod:`~ofl_core.batch.gpus`: a worker's pool of visible GPUs;
- :mod:`~ofl_core.batch.jobs`: dask-jobqueue and submitit job parameters and job scripts;
- :mod:`~ofl_core.batch.optional`: the cluster executors' optional dependencies;
- :mod:`~ofl_core.batch.grid`: :func:`~ofl_core.batch.grid.run_grid`, the pending-task loop;
- :mod:`~ofl_core.batch.report`: the HTML report.

A task keeps one layout on every executor: ``<out>/runs/<notebook>/<run_id>.ipynb`` plus the
sidecar ``<run_id>.json`` written last, both atomically; figures in
``<out>/figures/<notebook>/``; the report in ``<out>/report/index.html``.
"""
