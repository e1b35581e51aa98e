"""OpenPBS / PBS Pro execjob_end hook for workload-attribution: tells `attribution serve` that a job's
run ended (POST /v1/webhooks/pbs), through deployments/notify/attribution-notify.

Install once, as root on the PBS server host (the hook runs on each job's mother superior MoM when
the job's run ends, its Exit_status set):

    qmgr -c "create hook attribution_end event=execjob_end"
    qmgr -c "import hook attribution_end application/x-python default attribution_end.py"

and on every execution host attribution-notify at /usr/local/libexec/attribution-notify (or where
$ATTRIBUTION_NOTIFY says, in the MoM's environment) with its configuration (its url the service's
/v1/webhooks/pbs, the cluster's name). The hook hands the notice over and accepts the event at once:
the notifier spools it and sends it in the background, so the MoM never waits for the service, and
a failure to hand it over is logged (the nightly backfill finds the job anyway), never the job's.
"""

import json
import os
import subprocess

import pbs

NOTIFY = os.environ.get("ATTRIBUTION_NOTIFY", "/usr/local/libexec/attribution-notify")


def notice(job):
    """The job's end as the service's PbsJobEvent reads it (connectors/pbs.py)."""
    got = {
        "job_id": str(job.id),
        "exit_status": int(job.Exit_status),
        "run_count": int(job.run_count) if job.run_count is not None else None,
        "exec_host": str(job.exec_host) if job.exec_host is not None else None,
        "queue": str(job.queue) if job.queue is not None else None,
    }
    return {k: v for k, v in got.items() if v is not None}


def main():
    event = pbs.event()
    try:
        body = json.dumps(notice(event.job))
        done = subprocess.run([NOTIFY], input=body, capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            pbs.logmsg(pbs.LOG_ERROR, f"attribution_end: {done.stderr.strip()[:300]}")
    except Exception as exc:  # never the job's failure: the backfill finds what was not sent
        pbs.logmsg(pbs.LOG_ERROR, f"attribution_end: {type(exc).__name__}: {exc}")
    event.accept()


main()
