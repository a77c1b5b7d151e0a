// Streams (wire-protocol-extensions §18): the registered stream queries, their source and
// sink queues, and per source partition the state they keep and their last cycle.

function fmtBytes(value) {
  const n = Number(value || 0);
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

view("streams", {
  title: "Streams",
  async load() {
    const answer = await Api.get("/streams/v1/queries");
    if (!answer.queries.length) {
      return section("Queries", h("p", { "data-empty": "streams" },
        "No stream query registered yet (the official client's Stream.run registers one)."));
    }
    return answer.queries.map((q) => section(`Query ${q.name}`,
      figures([
        ["Source", link(q.sourceQueue, ["queues", q.sourceQueue]), "source"],
        ["Sink", q.sinkQueue ? link(q.sinkQueue, ["queues", q.sinkQueue]) : "–", "sink"],
        ["Consumer group", `streams.${q.name}`, "group"],
        ["Config hash", h("code", {}, q.configHash), "configHash"],
        ["State keys", fmtInt(q.partitions.reduce((n, p) => n + p.stateKeys, 0)), "totalKeys"],
      ]),
      table([
        ["Partition", (p) => p.partition || p.partitionId, "partition"],
        ["State keys", (p) => fmtInt(p.stateKeys), "stateKeys"],
        ["State size", (p) => fmtBytes(p.stateBytes), "stateBytes"],
        ["Cycles", (p) => fmtInt(p.cycles), "cycles"],
        ["Last cycle", (p) => fmtTime(p.lastCycleAt), "lastCycle"],
      ], q.partitions, { key: (p) => p.partitionId, empty: "No cycle committed yet." })));
  },
});
