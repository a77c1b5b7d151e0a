"""The route table: every route the broker serves, one row each (see `broker.endpoint`).

The Starlette routes and `/openapi.json` are both derived from `ENDPOINTS`; a route that is
not in this table does not exist. Each row's `access` is who may call it when auth is on
(wire-protocol §9); decisions beyond §9's list: `POST /api/v1/fetch` is READ_ONLY (it reads,
like the DLQ and message GETs), the DLQ retry route READ_WRITE (as §9 suggests), and
`/openapi.json` and `/docs` PUBLIC (and skipped by default: the API description is no secret),
and `/`, the dashboard page, PUBLIC (in §9's default skip list: it holds no data; the page asks
for a token and calls the API with it).
"""

from __future__ import annotations

from broker import openapi
from broker.auth.access import Access
from broker.dashboard import page as dashboard
from broker.endpoint import HTML, TEXT, Endpoint
from broker.routes import (
    ack,
    analytics,
    changes,
    dlq,
    ephemeral,
    fetch,
    groups,
    health,
    kv,
    lease,
    messages,
    metrics,
    pop,
    push,
    queues,
    resources,
    status,
    streams,
    system,
    tenants,
    timers,
    traces,
    transaction,
)
from broker.wire import ack as ack_wire
from broker.wire import analytics as analytics_wire
from broker.wire import changes as changes_wire
from broker.wire import ephemeral as eph_wire
from broker.wire import fetch as fetch_wire
from broker.wire import groups as groups_wire
from broker.wire import kv as kv_wire
from broker.wire import messages as messages_wire
from broker.wire import pop as pop_wire
from broker.wire import push as push_wire
from broker.wire import queues as queues_wire
from broker.wire import resources as resources_wire
from broker.wire import streams as streams_wire
from broker.wire import system as system_wire
from broker.wire import tenants as tenants_wire
from broker.wire import timers as timers_wire
from broker.wire import traces as traces_wire
from broker.wire import transaction as tx_wire
from broker.wire.binary import FRAMED_POP_MEDIA_TYPE
from broker.wire.common import (
    AfterQuery,
    ErrorBody,
    FreeForm,
    QueuePath,
    RefusalBody,
)

PUBLIC, READ_ONLY, WRITE_ONLY = Access.PUBLIC, Access.READ_ONLY, Access.WRITE_ONLY
READ_WRITE, ADMIN, OPERATOR = Access.READ_WRITE, Access.ADMIN, Access.OPERATOR
_GROUPS = "/api/v1/consumer-groups"
# The KV path routes' errors; 404 and 405 only from the router (a key with a newline
# matches no route, as for the traces' names; empty segments land on POST /api/v1/kv).
_KV_PATH_ERRORS = {400: RefusalBody, 404: ErrorBody, 405: ErrorBody,
                   413: RefusalBody, 503: RefusalBody}
# JSON, or framed for `frames=true` (§7.4)
_EPH_FAIL = eph_wire.EphemeralFailure
_POPPED = {200: (pop_wire.PopAnswer, FRAMED_POP_MEDIA_TYPE), 204: None}

ENDPOINTS: list[Endpoint] = [
    # Core message routes (§4)
    Endpoint("POST", "/api/v1/push", push.push, "Append messages (per-item verdicts)",
             {201: list[push_wire.PushResult] | push_wire.PushCounts, 429: ErrorBody},
             body=push_wire.PushBody, binary_body=push.binary_body, decode=push.json_body,
             access=WRITE_ONLY),
    Endpoint("GET", "/api/v1/pop/queue/{queue}", pop.pop_queue,
             "Pop a leased batch from a queue's partitions", _POPPED,
             path_params=QueuePath, query=pop_wire.PopQuery, changes_state=True, access=READ_WRITE),
    Endpoint("GET", "/api/v1/pop/queue/{queue}/partition/{partition}", pop.pop_partition,
             "Pop a leased batch from one partition", _POPPED,
             path_params=pop_wire.QueuePartitionPath, query=pop_wire.PopQuery,
             changes_state=True, access=READ_WRITE),
    Endpoint("GET", "/api/v1/pop", pop.pop_discovery,
             "Pop across the queues of a namespace and/or task",
             {**_POPPED, 400: pop_wire.DiscoveryFailure}, query=pop_wire.PopQuery,
             changes_state=True, client_error=pop_wire.DiscoveryFailure.of, access=READ_WRITE),
    Endpoint("POST", "/api/v1/ack", ack.ack_one, "Acknowledge one message (offset commit)",
             {200: list[ack_wire.AckResult]}, body=ack_wire.AckItemIn, access=READ_WRITE),
    Endpoint("POST", "/api/v1/ack/batch", ack.ack_batch,
             "Acknowledge many messages in one database transaction",
             {200: list[ack_wire.AckResult]}, body=ack_wire.AckBatchBody,
             decode=ack.batch_body, access=READ_WRITE),
    Endpoint("POST", "/api/v1/transaction", transaction.transaction,
             "Pushes and acks, all or nothing",
             {200: tx_wire.TransactionAnswer, 400: tx_wire.TransactionAnswer},
             body=tx_wire.TransactionBody, binary_body=transaction.binary_body,
             client_error=transaction.failure, access=READ_WRITE),
    Endpoint("POST", "/api/v1/lease/{leaseId}/extend", lease.extend,
             "Extend every live lease of a lease id", {200: ack_wire.ExtendAnswer},
             path_params=ack_wire.LeasePath, body=ack_wire.ExtendBody, access=READ_WRITE),
    Endpoint("POST", "/api/v1/configure", queues.configure,
             "Create a queue or change its options", {200: queues_wire.ConfigureAnswer},
             body=queues_wire.ConfigureBody, access=READ_WRITE),
    Endpoint("DELETE", "/api/v1/resources/queues/{queue}", queues.delete_queue,
             "Delete a queue with everything it owns", {200: queues_wire.DeleteQueueAnswer},
             path_params=QueuePath, access=ADMIN),
    Endpoint("POST", "/api/v1/fetch", fetch.fetch, "Read by offset (no lease, no cursor)",
             {200: fetch_wire.FetchAnswer}, body=fetch_wire.FetchBody, access=READ_ONLY),
    # DLQ and messages (§5)
    Endpoint("GET", "/api/v1/dlq", dlq.list_dlq, "List dead letters, newest first",
             {200: messages_wire.DlqPage}, query=messages_wire.DlqQuery, access=READ_ONLY),
    Endpoint("POST", "/api/v1/messages/{partitionId}/{transactionId:path}/retry",
             messages.retry, "Replay a dead letter as a new message",
             # A 404 always has `error`; the route's own adds the address (MessageMissing),
             # the router's (a path no route matches) does not.
             {200: messages_wire.RetryAnswer, 404: ErrorBody},
             path_params=messages_wire.MessagePath, access=READ_WRITE),
    Endpoint("GET", "/api/v1/messages/{partitionId}/{transactionId:path}",
             messages.get_message, "One message by address",
             {200: messages_wire.MessageDetail, 404: ErrorBody},
             path_params=messages_wire.MessagePath, access=READ_ONLY),
    Endpoint("DELETE", "/api/v1/messages/{partitionId}/{transactionId:path}",
             messages.delete_message, "Delete the dead letters of an address",
             {200: messages_wire.MessageDeleted, 404: ErrorBody},
             path_params=messages_wire.MessagePath, access=READ_WRITE),
    Endpoint("GET", "/api/v1/messages", messages.list_messages, "List messages",
             {200: messages_wire.MessageList}, query=messages_wire.MessagesQuery, access=READ_ONLY),
    # Traces (§6.4): recording is READ_WRITE (a consumer's), lookups READ_ONLY
    Endpoint("POST", "/api/v1/traces", traces.record, "Record a trace of a message",
             {201: traces_wire.TraceRecorded, 404: ErrorBody}, body=traces_wire.TraceBody,
             access=READ_WRITE),
    Endpoint("GET", "/api/v1/traces/names", traces.names, "Trace names with their counts",
             {200: traces_wire.TraceNames}, query=traces_wire.TraceNamesQuery,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/traces/by-name/{name:path}", traces.by_name,
             # A 404 only from the router (a path no route matches, e.g. one with a newline).
             "Traces carrying a name, newest first",
             {200: traces_wire.NamedTraces, 404: ErrorBody},
             path_params=traces_wire.TraceNamePath, query=traces_wire.TracePageQuery,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/traces/{partitionId}/{transactionId:path}", traces.of_message,
             "The traces of one message, oldest first",
             {200: traces_wire.MessageTraces, 404: ErrorBody},
             path_params=traces_wire.TracePath, query=traces_wire.TraceMessageQuery,
             access=READ_ONLY),
    # Consumer groups (§6.1)
    Endpoint("GET", _GROUPS, groups.list_groups, "List consumer groups per queue",
             {200: list[groups_wire.GroupSummaryOut]}, access=READ_ONLY),
    Endpoint("GET", _GROUPS + "/lagging", groups.lagging, "Partitions whose group lags",
             {200: list[groups_wire.LaggingOut]}, query=groups_wire.LaggingQuery, access=READ_ONLY),
    Endpoint("POST", _GROUPS + "/{group}/subscription", groups.subscription,
             "Change a group's stored subscription instant",
             {200: groups_wire.SubscriptionAnswer}, path_params=groups_wire.GroupPath,
             body=groups_wire.SubscriptionBody, access=READ_WRITE),
    Endpoint("POST", _GROUPS + "/{group}/queues/{queue}/partitions/{partition}/seek",
             groups.seek_partition, "Move a group's cursor on one partition",
             {200: groups_wire.PartitionSeekAnswer, 404: ErrorBody},
             path_params=groups_wire.GroupPartitionPath, body=groups_wire.SeekBody,
             access=READ_WRITE),
    Endpoint("POST", _GROUPS + "/{group}/queues/{queue}/seek", groups.seek_queue,
             "Move a group's cursors on a queue",
             {200: groups_wire.QueueSeekAnswer, 404: ErrorBody},
             path_params=groups_wire.GroupQueuePath, body=groups_wire.SeekBody, access=READ_WRITE),
    Endpoint("DELETE", _GROUPS + "/{group}/queues/{queue}", groups.delete_group_for_queue,
             "Delete a group's cursors on one queue", {200: groups_wire.GroupQueueDeleted},
             path_params=groups_wire.GroupQueuePath, query=groups_wire.DeleteGroupQuery,
             access=ADMIN),
    Endpoint("GET", _GROUPS + "/{group}", groups.group_detail, "A group's cursors per queue",
             {200: groups_wire.GroupDetail}, path_params=groups_wire.GroupPath, access=READ_ONLY),
    Endpoint("DELETE", _GROUPS + "/{group}", groups.delete_group, "Delete a group's cursors",
             {200: groups_wire.GroupDeleted}, path_params=groups_wire.GroupPath,
             query=groups_wire.DeleteGroupQuery, access=ADMIN),
    # Resources (§6.2)
    Endpoint("GET", "/api/v1/resources/queues", resources.list_queues, "List queues",
             {200: resources_wire.QueueList}, query=resources_wire.QueueListQuery,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/queues/{queue}/depth", resources.queue_depth,
             "A queue's backlog per partition", {200: resources_wire.QueueDepth, 404: ErrorBody},
             path_params=QueuePath, query=resources_wire.DepthQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/queues/{queue}", resources.queue_detail,
             "One queue with its partitions",
             {200: resources_wire.QueueDetail, 404: ErrorBody}, path_params=QueuePath,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/partitions", resources.list_partitions,
             "List partitions", {200: resources_wire.PartitionList},
             query=resources_wire.PartitionListQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/namespaces", resources.namespaces,
             "Totals per namespace", {200: resources_wire.NamespaceList}, access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/tasks", resources.tasks, "Totals per task",
             {200: resources_wire.TaskList}, access=READ_ONLY),
    Endpoint("GET", "/api/v1/resources/overview", resources.overview, "System overview",
             {200: FreeForm}, access=READ_ONLY),
    # Status (§6.3): dashboard figures, free-form
    Endpoint("GET", "/api/v1/status", status.status, "Status figures", {200: FreeForm},
             query=resources_wire.StatusQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/status/queues", status.status_queues, "Status per queue",
             {200: FreeForm}, query=resources_wire.StatusQueuesQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/status/analytics", status.analytics,
             "Throughput, depth and lag per interval (sampled by the reaper)",
             {200: resources_wire.Analytics}, query=resources_wire.AnalyticsQuery,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/status/queues/{queue}/messages",
             status.status_queue_messages, "Recent messages of a queue",
             {200: FreeForm}, path_params=QueuePath,
             query=resources_wire.StatusMessagesQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/status/queues/{queue}", status.status_queue,
             "Status of one queue", {200: FreeForm, 404: ErrorBody},
             path_params=QueuePath, access=READ_ONLY),
    Endpoint("POST", "/api/v1/stats/refresh", status.refresh,
             "Take an analytics sample now", {200: FreeForm}, access=OPERATOR),
    # The analytics family: time series in Queen's shapes from the kept history
    # (core/upkeep/history.py), read-only like the status routes. A tenant's request sees
    # its own queues' series; the per-process figures are the operator's (broker/routes/
    # analytics.py).
    Endpoint("GET", "/api/v1/analytics/system-metrics", analytics.system_metrics,
             "Per process and bucket: CPU, memory, pool, parked pops, spool",
             {200: FreeForm}, query=analytics_wire.ProcessQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/analytics/worker-metrics", analytics.worker_metrics,
             "Cluster throughput, acks, errors and latency per bucket; processes; totals",
             {200: FreeForm}, query=analytics_wire.ProcessQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/analytics/queue-lag", analytics.queue_lag,
             "Per queue and bucket: messages delivered and sampled lag (newest first)",
             {200: list[analytics_wire.QueueLagPoint]}, query=analytics_wire.QueueWindowQuery,
             access=READ_ONLY),
    Endpoint("GET", "/api/v1/analytics/queue-ops", analytics.queue_ops,
             "Per queue and bucket: throughput, acks, depth, lag, parked pops",
             {200: FreeForm}, query=analytics_wire.QueueWindowQuery, access=READ_ONLY),
    Endpoint("GET", "/api/v1/analytics/retention", analytics.retention,
             "Per bucket: messages released by retention and evicted by maxWaitTimeSeconds",
             {200: FreeForm}, query=analytics_wire.QueueWindowQuery, access=READ_ONLY),
    # Offset-read discovery (§6.6), DLQ replay by id and bulk purge (§11). Access: the feed
    # reads like fetch (READ_ONLY); replay by id is the DLQ retry route's READ_WRITE; a bulk
    # purge destroys a queue's dead letters, so ADMIN like DELETE queue.
    Endpoint("POST", "/api/v1/partitions/changed", changes.changed,
             "Partitions written since an instant (changed_since)",
             {200: changes_wire.ChangedAnswer}, body=changes_wire.ChangedBody,
             access=READ_ONLY),
    Endpoint("POST", "/api/v1/dlq/{id}/replay", dlq.replay,
             "Replay one dead letter by its row id", {200: messages_wire.RetryAnswer,
                                                      404: messages_wire.DlqMissing},
             path_params=messages_wire.DlqIdPath, body=messages_wire.DlqReplayBody,
             access=READ_WRITE),
    Endpoint("DELETE", "/api/v1/dlq", dlq.purge, "Delete a queue's dead letters",
             {200: messages_wire.DlqPurged}, query=messages_wire.DlqPurgeQuery, access=ADMIN),
    # Ephemeral queues (wire-protocol-extensions §19): every refusal is {"error", "code"};
    # the only 404 a route itself answers is depth's `ephemeral_queue_not_found`.
    Endpoint("POST", "/api/v1/ephemeral/push", ephemeral.eph_push,
             "Push to an ephemeral queue (all or nothing)",
             {201: eph_wire.EphPushAnswer, 400: _EPH_FAIL, 429: _EPH_FAIL, 503: _EPH_FAIL},
             body=eph_wire.EphPushBody, client_error=ephemeral.failure, access=WRITE_ONLY),
    Endpoint("GET", "/api/v1/ephemeral/pop", ephemeral.eph_pop,
             "Pop from an ephemeral queue (leased unless autoAck; long poll with wait)",
             {200: eph_wire.EphPopAnswer, 400: _EPH_FAIL, 503: _EPH_FAIL},
             query=eph_wire.EphPopQuery, changes_state=True, client_error=ephemeral.failure,
             access=READ_WRITE),
    Endpoint("POST", "/api/v1/ephemeral/ack", ephemeral.eph_ack,
             "Settle, retry or fail ephemeral deliveries",
             {200: eph_wire.EphAckAnswer, 400: _EPH_FAIL, 503: _EPH_FAIL},
             body=eph_wire.EphAckBody, client_error=ephemeral.failure, access=READ_WRITE),
    Endpoint("POST", "/api/v1/ephemeral/configure", ephemeral.eph_configure,
             "Declare an ephemeral queue with its options",
             {201: eph_wire.EphConfigureAnswer, 400: _EPH_FAIL, 503: _EPH_FAIL},
             body=eph_wire.EphConfigureBody, client_error=ephemeral.failure, access=READ_WRITE),
    Endpoint("POST", "/api/v1/ephemeral/reset", ephemeral.eph_reset,
             "Drop an ephemeral queue's messages and leases",
             {200: eph_wire.EphResetAnswer, 400: _EPH_FAIL, 503: _EPH_FAIL},
             body=eph_wire.EphQueueBody, client_error=ephemeral.failure, access=READ_WRITE),
    Endpoint("DELETE", "/api/v1/ephemeral/queue/{queue:path}", ephemeral.eph_delete,
             "Delete an ephemeral queue with its declaration",
             {200: eph_wire.EphDeleteAnswer, 400: _EPH_FAIL, 503: _EPH_FAIL},
             path_params=eph_wire.EphQueuePath, client_error=ephemeral.failure,
             access=READ_WRITE),
    Endpoint("GET", "/api/v1/ephemeral/queues", ephemeral.eph_queues,
             "Every ephemeral queue with its gauges and options in force",
             {200: eph_wire.EphQueuesAnswer, 503: _EPH_FAIL}, access=READ_ONLY),
    Endpoint("GET", "/api/v1/ephemeral/queues/{queue:path}/depth", ephemeral.eph_depth,
             "An ephemeral queue's backlog per partition and group",
             {200: eph_wire.EphDepthAnswer, 400: _EPH_FAIL, 404: _EPH_FAIL, 503: _EPH_FAIL},
             path_params=eph_wire.EphQueuePath, query=eph_wire.EphDepthQuery,
             client_error=ephemeral.failure, access=READ_ONLY),
    # KV store, locks and semaphores (extensions §14, §15). The batch routes are READ_WRITE
    # even for reads (§14.1, decision 15); the namespace listing is the dashboard's, READ_ONLY
    # like the other resource listings.
    Endpoint("POST", "/api/v1/kv", kv.kv_batch, "KV operations, batched, in one transaction",
             {200: kv_wire.KvResults, 400: RefusalBody, 413: RefusalBody,
              503: RefusalBody},
             body=kv_wire.KvBody, decode=kv_wire.decode_kv, access=READ_WRITE),
    Endpoint("GET", "/api/v1/kv/{ns}/{key:path}", kv.kv_get, "One KV get (ETag: the version)",
             {200: kv_wire.FreeFormElement, **_KV_PATH_ERRORS},
             path_params=kv_wire.KvPath, access=READ_ONLY),
    Endpoint("PUT", "/api/v1/kv/{ns}/{key:path}", kv.kv_put, "One KV put",
             {200: kv_wire.FreeFormElement, **_KV_PATH_ERRORS},
             path_params=kv_wire.KvPath, body=kv_wire.KvPutBody, decode=kv_wire.decode_kv,
             access=READ_WRITE),
    Endpoint("DELETE", "/api/v1/kv/{ns}/{key:path}", kv.kv_delete, "One KV delete",
             {200: kv_wire.FreeFormElement, **_KV_PATH_ERRORS},
             path_params=kv_wire.KvPath, body=kv_wire.KvDeleteBody,
             decode=kv_wire.decode_optional_kv, access=READ_WRITE),
    Endpoint("POST", "/api/v1/locks", kv.locks, "Lock and semaphore operations",
             {200: kv_wire.LockResults, 400: RefusalBody, 503: RefusalBody},
             body=kv_wire.LocksBody, decode=kv_wire.decode_locks,
             access=READ_WRITE),
    Endpoint("GET", "/api/v1/resources/kv-namespaces", kv.kv_namespaces,
             "KV namespaces: live keys, value bytes, keys expiring soon",
             {200: kv_wire.NamespacePage, 400: RefusalBody, 503: RefusalBody},
             query=AfterQuery, access=READ_ONLY),
    # Timers (extensions §16). Scheduling is producing (WRITE_ONLY); the cancel route is
    # READ_WRITE and never paused; peek and list READ_ONLY. `GET /api/v1/timers` (queues with
    # pending timers) is the dashboard's, READ_ONLY like the other listings. A 404 on the
    # path routes only from the router (a path no route matches, e.g. with a newline).
    Endpoint("POST", "/api/v1/timers", timers.timers_call,
             "Schedule, reschedule and cancel timers, batched, in one transaction",
             {200: timers_wire.TimersResults, 400: RefusalBody,
              403: RefusalBody, 413: RefusalBody,
              503: RefusalBody},
             body=timers_wire.TimersBody, decode=timers_wire.decode_timers,
             access=WRITE_ONLY),
    Endpoint("GET", "/api/v1/timers", timers.timer_queues,
             "Queues with pending timers: how many, the next due, how many failing",
             {200: timers_wire.TimerQueues, 400: RefusalBody,
              503: RefusalBody},
             query=AfterQuery, access=READ_ONLY),
    Endpoint("DELETE", "/api/v1/timers/{queue}/{timerKey:path}", timers.cancel,
             "Cancel one timer", {200: timers_wire.TimerResult, 400: RefusalBody,
                                  404: ErrorBody, 405: ErrorBody,
                                  503: RefusalBody},
             path_params=timers_wire.TimerPath, query=timers_wire.CancelQuery,
             access=READ_WRITE),
    Endpoint("GET", "/api/v1/timers/{queue}/{timerKey:path}", timers.peek,
             "One pending timer, with its payload as stored",
             {200: timers_wire.TimerRowOut, 400: RefusalBody,
              404: ErrorBody, 503: RefusalBody},
             path_params=timers_wire.TimerPath, access=READ_ONLY),
    Endpoint("GET", "/api/v1/timers/{queue}", timers.list_timers,
             "A queue's pending timers by key (after, limit), or their count (mode=count)",
             {200: timers_wire.TimerListOrCount, 400: RefusalBody,
              404: ErrorBody, 503: RefusalBody},
             path_params=timers_wire.TimerQueuePath, query=timers_wire.TimerListQuery,
             access=READ_ONLY),
    # Streams (wire-protocol-extensions §18): the client's stream runtime. Registering and
    # committing cycles are READ_WRITE, reading state READ_ONLY; the listing (dashboard) is
    # READ_ONLY, deleting a query with its state ADMIN like deleting a queue.
    Endpoint("POST", "/streams/v1/queries", streams.register,
             "Register a stream query (409 when its operator chain changed)",
             {200: streams_wire.RegisterAnswer, 409: streams_wire.RegisterConflict},
             body=streams_wire.RegisterBody, access=READ_WRITE),
    Endpoint("POST", "/streams/v1/state/get", streams.state_get,
             "A stream query's state rows of one partition",
             {200: streams_wire.StateAnswer, 400: streams_wire.StateAnswer,
              413: streams_wire.StateAnswer},
             body=streams_wire.StateGetBody, client_error=streams.state_failure,
             access=READ_ONLY),
    Endpoint("POST", "/streams/v1/cycle", streams.cycle,
             "Commit a cycle: state ops, sink pushes and the source ack, all or nothing",
             {200: streams_wire.CycleAnswer}, body=streams_wire.CycleBody, access=READ_WRITE),
    Endpoint("GET", "/streams/v1/queries", streams.list_queries,
             "Stream queries with their partitions' state and last cycle",
             {200: streams_wire.QueryList}, access=READ_ONLY),
    Endpoint("DELETE", "/streams/v1/queries/{name}", streams.delete_query,
             "Delete a stream query with its state", {200: streams_wire.QueryDeleted},
             path_params=streams_wire.QueryNamePath, access=ADMIN),
    # Health and metrics (§6.5)
    Endpoint("GET", "/health", health.health, "Liveness (503 while the database is down)",
             {200: resources_wire.Health, 503: resources_wire.Health}, access=PUBLIC),
    Endpoint("GET", "/metrics", metrics.metrics, "Cluster counters (JSON)", {200: FreeForm},
             access=PUBLIC),
    Endpoint("GET", "/metrics/prometheus", metrics.prometheus_text,
             "Cluster counters and gauges (Prometheus text format)", {200: TEXT},
             access=PUBLIC),
    # Maintenance switches and the push spool (§11)
    Endpoint("GET", "/api/v1/system/maintenance", system.get_maintenance,
             "Both maintenance switches and the push spool's figures",
             {200: system_wire.MaintenanceAnswer}, access=OPERATOR),
    Endpoint("POST", "/api/v1/system/maintenance", system.set_maintenance,
             "Send pushes to the disk spool (enabled=true) or back to the database",
             {200: system_wire.MaintenanceAnswer}, body=system_wire.SwitchBody,
             access=OPERATOR),
    Endpoint("GET", "/api/v1/system/maintenance/pop", system.get_pop_maintenance,
             "Both maintenance switches and the push spool's figures",
             {200: system_wire.MaintenanceAnswer}, access=OPERATOR),
    Endpoint("POST", "/api/v1/system/maintenance/pop", system.set_pop_maintenance,
             "Pause pops (enabled=true: they answer 204) or serve them again",
             {200: system_wire.MaintenanceAnswer}, body=system_wire.SwitchBody,
             access=OPERATOR),
    # Tenants and their quotas (docs/security/tenants.md): the deployment operator's, like
    # the maintenance switches (OPERATOR: an admin token bound to no tenant).
    Endpoint("GET", "/api/v1/tenants", tenants.list_tenants,
             "Every tenant with its queues, stored bytes and quota",
             {200: tenants_wire.TenantList}, access=OPERATOR),
    Endpoint("GET", "/api/v1/tenants/{tenant}", tenants.get_tenant,
             "One tenant (`_default`: the default tenant)", {200: tenants_wire.TenantOut},
             path_params=tenants_wire.TenantPath, access=OPERATOR),
    Endpoint("PUT", "/api/v1/tenants/{tenant}/quota", tenants.put_quota,
             "Set a tenant's quota (every limit not given is unlimited)",
             {200: tenants_wire.TenantOut}, path_params=tenants_wire.TenantPath,
             body=tenants_wire.QuotaBody, access=OPERATOR),
    Endpoint("DELETE", "/api/v1/tenants/{tenant}/quota", tenants.delete_quota,
             "Remove a tenant's quota (unlimited)", {200: tenants_wire.QuotaCleared},
             path_params=tenants_wire.TenantPath, access=OPERATOR),
    # The dashboard: one self-contained page over this API (broker/dashboard)
    Endpoint("GET", "/", dashboard.serve, "The dashboard (HTML)", {200: HTML}, access=PUBLIC),
    # This document
    Endpoint("GET", "/openapi.json", openapi.serve_document, "This API as OpenAPI 3.1",
             {200: FreeForm}, access=PUBLIC),
    Endpoint("GET", "/docs", openapi.serve_page, "This API as a page", {200: HTML}, access=PUBLIC),
]
