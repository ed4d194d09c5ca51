"""Long jobs on the speech server (`/v1/audio/jobs`): made chunk by chunk, stored, resumed after a restart.

    from rumik_app.serve.jobs import JobLimits, JobRunner, routes
    runner = JobRunner(adapter, Path(data_dir) / "jobs", JobLimits(max_active=4))   # create_app does this
    app.include_router(routes.router)

store (SQLite + chunk files under --data-dir, the bounds), runner (the work on the batch rows,
resume, cancel, progress), routes (the HTTP API, docs/server.md "Long jobs").
"""

from rumik_app.serve.jobs.runner import JobRunner
from rumik_app.serve.jobs.store import JobLimits

__all__ = ["JobLimits", "JobRunner"]
