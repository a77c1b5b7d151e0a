// Traces by name and by message (wire-protocol §6.4). A broker without the traces routes
// answers 404 from its router; the view then says so instead of failing.

function traceRows(traces, withMessage) {
  return table([
    ["At", (t) => fmtTime(t.created_at)],
    ["Event", (t) => t.event_type, "event"],
    ["Group", (t) => t.consumer_group || "–"],
    ["Worker", (t) => t.worker_id || "–"],
    ...(withMessage ? [
      ["Queue / partition", (t) => `${t.queue_name || "?"} / ${t.partition_name || "?"}`],
      ["Message", (t) => link(t.transaction_id, ["traces"], { pid: t.partition_id, tx: t.transaction_id }), "transactionId"],
    ] : []),
    ["Names", (t) => (t.trace_names || []).join(", "), "names"],
    ["Data", (t) => h("code", {}, preview(t.data, 160)), "data"],
  ], traces, { key: (t) => String(t.id), empty: "No trace." });
}

view("traces", {
  title: "Traces",
  frame(ctx) {
    ctx.controls.append(searchForm([["name", "Trace name"]], ctx.params, ["pid", "tx"]),
      searchForm([["pid", "Partition id"], ["tx", "Transaction id"]], ctx.params, ["name"]));
  },
  async load(ctx) {
    const { name, pid, tx } = ctx.params;
    const offset = intParam(ctx.params, "offset", 0);
    try {
      if (pid && tx) {
        const answer = await Api.get(`/api/v1/traces/${seg(pid)}/${seg(tx)}`);
        return section(`Traces of message ${tx}`, traceRows(answer.traces || [], false));
      }
      if (name) {
        const answer = await Api.get(`/api/v1/traces/by-name/${seg(name)}`, { limit: PAGE, offset });
        return [section(`Traces named ${name}`, traceRows(answer.traces || [], true)),
          pager(answer.total || 0, PAGE, offset)];
      }
      const answer = await Api.get("/api/v1/traces/names", { limit: PAGE, offset });
      return [section("Trace names", table([
        ["Name", (n) => link(n.trace_name, ["traces"], { name: n.trace_name }), "name"],
        ["Traces", (n) => fmtInt(n.trace_count), "count"],
        ["Messages", (n) => fmtInt(n.message_count)],
        ["Last seen", (n) => fmtTime(n.last_seen)],
      ], answer.trace_names || [], { key: (n) => n.trace_name, empty: "No trace recorded yet." })),
      pager(answer.total || 0, PAGE, offset)];
    } catch (error) {
      if (error instanceof ApiError && error.missingRoute) return unavailable("Traces", error);
      throw error;
    }
  },
});
