// Traces (wire-protocol §6.4): the trace names (searched and paged by the broker), the
// traces carrying one name (newest first, with their message), and the traces of one
// message (oldest first, paged on by the broker's `nextOffset`).

function traceRows(traces, withMessage) {
  return table([
    ["At", (t) => fmtTime(t.created_at), "at"],
    ["Event", (t) => t.event_type, "event"],
    ["Group", (t) => t.consumer_group || "–", "group"],
    ["Worker", (t) => t.worker_id || "–"],
    ...(withMessage ? [
      ["Queue / partition", (t) => `${t.queue_name || "?"} / ${t.partition_name || "?"}`, "where"],
      ["Message", (t) => link(t.transaction_id, ["traces"], { pid: t.partition_id, tx: t.transaction_id }), "transactionId"],
    ] : []),
    ["Names", (t) => (t.trace_names || []).join(", "), "names"],
    ["Data", (t) => h("code", {}, preview(t.data, 160)), "data"],
  ], traces, { key: (t) => String(t.id), empty: "No trace." });
}

view("traces", {
  title: "Traces",
  frame(ctx) {
    ctx.controls.append(searchForm([["search", "Name contains"]], ctx.params, ["name", "pid", "tx"]),
      searchForm([["pid", "Partition id"], ["tx", "Transaction id"]], ctx.params, ["name", "search"]));
  },
  async load(ctx) {
    const { name, pid, tx, search } = ctx.params;
    const offset = intParam(ctx.params, "offset", 0);
    if (pid && tx) {
      const answer = await Api.get(`/api/v1/traces/${seg(pid)}/${seg(tx)}`, { offset });
      const shown = answer.traces.length;
      // No total here: a page the broker cut (its byte budget, or the 1000 a page holds)
      // says where the rest start.
      return [section(`Traces of message ${tx}`, traceRows(answer.traces, false)),
        cursorPager("offset", offset, answer.truncated ? answer.nextOffset : null,
          shown ? `${fmtInt(offset + 1)}–${fmtInt(offset + shown)}` : "none")];
    }
    if (name) {
      const answer = await Api.get(`/api/v1/traces/by-name/${seg(name)}`, { limit: PAGE, offset });
      return [section(`Traces named ${name}`,
        h("p", {}, h("span", { "data-field": "total" }, fmtInt(answer.total)), " trace(s)."),
        traceRows(answer.traces, true)),
      // A page the broker cut at its byte budget holds fewer traces: the next one starts
      // after them, not a whole PAGE on.
      pager(answer.total, answer.truncated ? Math.max(answer.traces.length, 1) : PAGE, offset)];
    }
    const answer = await Api.get("/api/v1/traces/names", { limit: PAGE, offset, search });
    return [section("Trace names", table([
      ["Name", (n) => link(n.trace_name, ["traces"], { name: n.trace_name }), "name"],
      ["Traces", (n) => fmtInt(n.trace_count), "count"],
      ["Messages", (n) => fmtInt(n.message_count), "messages"],
      ["Last seen", (n) => fmtTime(n.last_seen)],
    ], answer.trace_names, { key: (n) => n.trace_name,
      empty: search ? `No trace name contains "${search}".` : "No trace recorded yet." })),
    pager(answer.total, PAGE, offset)];
  },
});
