// Analytics over a chosen window (the last 15 minutes to 30 days, or `from`/`to` in the
// route: #/analytics?from=ISO&to=ISO), optionally one queue: throughput, lag, depth, dead
// letters and latency, from the analytics family.
//   GET /api/v1/analytics/worker-metrics  the cluster per bucket: messages, dead letters and
//     latency quantiles from every process's counters (one-minute rows, kept
//     PROCESS_METRICS_RETENTION_DAYS); timeSeries is newest first.
//   GET /api/v1/analytics/queue-ops       per queue and bucket: throughput, dead letters,
//     depth and lag from the reaper's samples (every STATS_SAMPLE_INTERVAL_MS, kept
//     METRICS_RETENTION_DAYS); series is oldest first.
// With a queue chosen the throughput, lag, depth and dead letters are that queue's
// (queue-ops); without, throughput and dead letters are the cluster's and lag and depth the
// worst and the sum over queues. Latency is always the cluster's (no per-queue histograms).

const WINDOWS = [["15m", "15 minutes", 15], ["1h", "1 hour", 60], ["6h", "6 hours", 360],
  ["24h", "24 hours", 1440], ["7d", "7 days", 10080], ["30d", "30 days", 43200]];
const LATENCY_KINDS = ["push", "pop", "ack"];

function windowOf(params) {
  return WINDOWS.find(([key]) => key === params.window) || WINDOWS[1];
}

// The window to read: `from`/`to` when the route gives both, else the preset up to now.
function rangeOf(params) {
  const [key, label, minutes] = windowOf(params);
  if (params.from && params.to) {
    return { key: "custom", text: `From ${fmtTime(params.from)} to ${fmtTime(params.to)}`,
      from: params.from, to: params.to };
  }
  const to = new Date();
  return { key, text: `The last ${label}`, to: to.toISOString(),
    from: new Date(to.getTime() - minutes * 60_000).toISOString() };
}

// queue-ops rows grouped by bucket: [bucket, [rows]] oldest first
function byBucket(series) {
  const groups = new Map();
  for (const row of series) {
    if (!groups.has(row.bucket)) groups.set(row.bucket, []);
    groups.get(row.bucket).push(row);
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

const total = (rows, key) => rows.reduce((sum, row) => sum + (row[key] || 0), 0);
const most = (values) => values.reduce((m, v) => (typeof v === "number" && v > m ? v : m), 0);

function throughputChart(times, series) {
  return lineChart("Throughput (messages per second)", times, series,
    { chart: "throughput", format: (v) => fmtInt(v) });
}

view("analytics", {
  title: "Analytics",
  frame(ctx) {
    const current = windowOf(ctx.params)[0];
    const select = h("select", { name: "window" }, WINDOWS.map(([key, label]) =>
      h("option", { value: key, selected: key === current }, label)));
    const queue = h("input", { name: "queue", value: ctx.params.queue || "", placeholder: "all queues" });
    const form = h("form", { class: "search" }, h("label", {}, "Window ", select), " ",
      h("label", {}, "Queue ", queue), " ", h("button", { type: "submit" }, "Apply"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setParams({ window: select.value, queue: queue.value.trim(), from: "", to: "" });
    });
    ctx.controls.append(form);
  },
  async load(ctx) {
    const chosen = rangeOf(ctx.params);
    const range = { from: chosen.from, to: chosen.to };
    const queue = ctx.params.queue || undefined;
    const [workers, ops] = await Promise.all([
      Api.get("/api/v1/analytics/worker-metrics", range),
      Api.get("/api/v1/analytics/queue-ops", { ...range, queue }),
    ]);
    const points = [...workers.timeSeries].reverse(); // oldest first
    const buckets = byBucket(ops.series);
    const queueTimes = buckets.map(([at]) => at);
    const pickQueue = (fn) => buckets.map(([, rows]) => fn(rows));
    const intro = h("p", { "data-window": chosen.key, "data-points": String(points.length),
      "data-buckets": String(buckets.length) },
      `${chosen.text}${queue ? `, queue ${queue}` : ", every queue"}: ` +
      `${fmtInt(points.length)} point(s) of ${workers.bucketMinutes} min from the processes' ` +
      `counters, ${fmtInt(buckets.length)} of ${ops.bucketMinutes} min from the queue samples.`);

    let throughput, dead;
    if (queue) {
      const seconds = ops.bucketMinutes * 60;
      throughput = throughputChart(queueTimes, [
        { name: "pushed", values: pickQueue((rows) => total(rows, "pushMessages") / seconds) },
        { name: "delivered", values: pickQueue((rows) => total(rows, "popMessages") / seconds) },
        { name: "acked", values: pickQueue((rows) => (total(rows, "ackSuccess") + total(rows, "deadLettered")) / seconds) },
      ]);
      dead = lineChart("Dead letters (per bucket)", queueTimes,
        [{ name: "dead-lettered", values: pickQueue((rows) => total(rows, "deadLettered")) }], { chart: "dlq" });
    } else {
      const times = points.map((p) => p.timestamp);
      throughput = throughputChart(times, [
        { name: "pushed", values: points.map((p) => p.pushPerSecond) },
        { name: "delivered", values: points.map((p) => p.popPerSecond) },
        { name: "acked", values: points.map((p) => p.ackPerSecond) },
      ]);
      dead = lineChart("Dead letters (per bucket)", times,
        [{ name: "dead-lettered", values: points.map((p) => p.dlqCount) }], { chart: "dlq" });
    }
    const latency = lineChart("Latency (milliseconds, p50 and p99, every queue)", points.map((p) => p.timestamp),
      LATENCY_KINDS.flatMap((kind) => [
        { name: `${kind} p50`, values: points.map((p) => p.latency[kind].p50Ms) },
        { name: `${kind} p99`, values: points.map((p) => p.latency[kind].p99Ms) },
      ]), { chart: "latency", format: (v) => fmtInt(v) });
    const summary = workers.summary;
    const sum = (k) => total(ops.series, k);
    const lagSeconds = most(ops.series.map((r) => r.maxLagMs)) / 1000;
    return [
      intro,
      figures([
        ["pushed", fmtInt(queue ? sum("pushMessages") : summary.totalPushMessages), "pushed"],
        ["delivered", fmtInt(queue ? sum("popMessages") : summary.totalPopMessages), "delivered"],
        ["acked", fmtInt(queue ? sum("ackSuccess") + sum("deadLettered") : summary.totalAckMessages), "acked"],
        ["dead-lettered", fmtInt(queue ? sum("deadLettered") : summary.totalDlq), "deadLettered"],
        ["lag (largest)", fmtSeconds(lagSeconds), "lag"],
        ["push p99", summary.latency.push.p99Ms == null ? "–" : `${fmtInt(summary.latency.push.p99Ms)} ms`, "pushP99"],
        ["ack p99", summary.latency.ack.p99Ms == null ? "–" : `${fmtInt(summary.latency.ack.p99Ms)} ms`, "ackP99"],
      ]),
      h("div", { class: "charts" },
        throughput,
        lineChart("Lag (seconds, largest)", queueTimes,
          [{ name: "lag", values: pickQueue((rows) => most(rows.map((r) => r.maxLagMs)) / 1000) }],
          { chart: "lag", format: (v) => (v < 120 ? `${Number(v.toFixed(1))} s` : fmtSeconds(v)) }),
        dead,
        latency,
        lineChart("Depth (messages waiting)", queueTimes,
          [{ name: "depth", values: pickQueue((rows) => total(rows, "depth")) }], { chart: "depth" })),
    ];
  },
});
