"""The names the processes agree on, each written once: Celery queues and tasks (outbox rows and
the task adapters in ``tasks``), and the names triggers and bookmarks are stored under."""

from __future__ import annotations

DEFAULT_QUEUE = "broker.default"
MAINTENANCE_QUEUE = "broker.maintenance"
#: webhook deliveries have their own queue: a slow receiver never holds up workflow steps
WEBHOOK_QUEUE = "broker.webhooks"

# Task names (the contract between the outbox rows and the task adapters in ``tasks``).
RUN_REQUEST = "broker.run_request"
RESUME_INSTANCE = "broker.resume_instance"
RUN_CHILD = "broker.run_child"
RUN_TASK = "broker.run_task"
#: a team's Python activity run as its own task (``@activity(run="task")``)
RUN_ACTIVITY = "broker.run_activity"
RELAY_OUTBOX = "broker.relay_outbox"
PROCESS_BOOKMARK_QUEUE = "broker.process_bookmark_queue"
FIRE_TIMERS = "broker.fire_timers"
RECOVER_STALLED = "broker.recover_stalled"
PURGE = "broker.purge"
DELIVER_WEBHOOK = "broker.deliver_webhook"
SYNC_WEBHOOKS = "broker.sync_webhooks"
#: seconds between syncs of clients.json's webhook endpoints into the database
SYNC_WEBHOOKS_INTERVAL = 15.0

MAINTENANCE_TASKS = (
    RELAY_OUTBOX,
    PROCESS_BOOKMARK_QUEUE,
    FIRE_TIMERS,
    RECOVER_STALLED,
    PURGE,
    SYNC_WEBHOOKS,
)
#: the task adapters that run one workflow step each: they get the step ceiling
STEP_TASKS = (RUN_REQUEST, RESUME_INSTANCE, RUN_CHILD)
#: seconds past ``BROKER_STEP_TIME_LIMIT`` before the pool kills a step's process: the step's own
#: watchdog records the fault at the limit, the kill frees the worker whatever the step is stuck in
STEP_KILL_GRACE = 5.0

# Trigger and bookmark names (``@activity(..., trigger=...)``, the trigger index, the queue).
HTTP_ENDPOINT = "Elsa.HttpEndpoint"
EVENT = "Elsa.Event"
TIMER = "Elsa.Timer"
CRON = "Elsa.Cron"
START_AT = "Elsa.StartAt"
WEBHOOK_EVENT = "Elsa.WebhookEventReceived"
#: the scheduled triggers (their stimulus is a due time, not a call)
SCHEDULED = (TIMER, CRON, START_AT)
