// Overview: counts, push rate, dead letters, database health, the worker that answered,
// and the groups that lag. The push rate is measured by this page from the broker's
// `appended` counter between two refreshes (a sample per refresh, kept for the session).

const pushSamples = [];  // {at: ms, appended, rate}

function samplePushRate(appended) {
  const now = Date.now();
  const last = pushSamples[pushSamples.length - 1];
  const rate = last && now > last.at ? Math.max(0, ((appended - last.appended) * 1000) / (now - last.at)) : null;
  pushSamples.push({ at: now, appended, rate });
  if (pushSamples.length > 120) pushSamples.shift();
  return rate;
}

async function healthOf() {
  try {
    return await Api.get("/health");
  } catch (error) {
    return error instanceof ApiError && error.body ? error.body : { status: "unreachable", database: "unknown" };
  }
}

view("overview", {
  title: "Overview",
  async load() {
    const [overview, health, metrics, lagging] = await Promise.all([
      Api.get("/api/v1/resources/overview"),
      healthOf(),
      Api.get("/metrics").catch(() => null),
      Api.get(`${GROUPS}/lagging`, { minLagSeconds: 60 }),
    ]);
    const m = overview.messages || {};
    const rate = samplePushRate(m.appended || 0);
    const dead = h("a", { href: "#/dlq" }, fmtInt(overview.deadLetters));
    const out = [
      figures([
        ["Queues", link(fmtInt(overview.queues), ["queues"]), "queues"],
        ["Partitions", fmtInt(overview.partitions), "partitions"],
        ["Messages retained", fmtInt(m.total), "messages"],
        ["Pending", fmtInt(m.pending), "pending"],
        ["Processing", fmtInt(m.processing), "processing"],
        ["Dead letters", dead, "deadLetters"],
        ["Consumer groups", link(fmtInt(overview.consumerGroups), ["groups"]), "consumerGroups"],
        ["Live leases", fmtInt(overview.activeLeases), "activeLeases"],
        ["Messages ever pushed", fmtInt(m.appended), "appended"],
        ["Push rate", rate == null ? "measuring…" : `${rate.toFixed(1)} msg/s`, "pushRate"],
      ]),
    ];
    const samples = pushSamples.filter((s) => s.rate != null);
    if (samples.length > 1) {
      out.push(lineChart("Push rate seen by this page (msg/s)", samples.map((s) => new Date(s.at).toISOString()),
        [{ name: "pushed/s", values: samples.map((s) => Number(s.rate.toFixed(2))) }],
        { chart: "push-rate", format: (v) => String(v) }));
    }
    const healthy = health.status === "healthy";
    const system = [
      ["Database", h("span", { class: healthy ? "good" : "bad" }, health.database || "unknown"), "database"],
      ["Broker", health.status || "unknown", "health"],
      ["Version", health.version || "–", "version"],
    ];
    if (metrics) {
      const db = metrics.database || {};
      system.push(
        ["Worker pid (this answer)", String(metrics.pid ?? "–"), "pid"],
        ["Worker uptime", fmtSeconds(metrics.uptime), "uptime"],
        ["Pool (open / idle / max)", `${fmtInt(db.poolSize)} / ${fmtInt(db.idleConnections)} / ${fmtInt(db.maxSize)}`, "pool"],
      );
    }
    out.push(section("Broker and database", figures(system)));
    const rows = lagging.slice().sort((a, b) => b.time_lag_seconds - a.time_lag_seconds).slice(0, 10);
    out.push(section(`Lagging partitions (over 60 s behind): ${fmtInt(lagging.length)}`,
      table([
        ["Group", (r) => link(r.consumer_group, ["group", r.consumer_group])],
        ["Queue", (r) => link(r.queue_name, ["queue", r.queue_name])],
        ["Partition", (r) => r.partition_name],
        ["Offset lag", (r) => fmtInt(r.offset_lag), "offsetLag"],
        ["Time lag", (r) => fmtSeconds(r.time_lag_seconds)],
      ], rows, { key: (r) => `${r.consumer_group}/${r.queue_name}/${r.partition_name}`,
        empty: "No group is more than a minute behind." })));
    return out;
  },
});
