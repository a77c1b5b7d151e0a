// Dead letters, newest first, filtered and paged by the broker; replay or delete one.

view("dlq", {
  title: "Dead letters",
  frame(ctx) {
    ctx.controls.append(searchForm([["queue", "Queue"], ["consumerGroup", "Consumer group"]], ctx.params));
  },
  async load(ctx) {
    const offset = intParam(ctx.params, "offset", 0);
    const answer = await Api.get("/api/v1/dlq", {
      queue: ctx.params.queue, consumerGroup: ctx.params.consumerGroup, limit: PAGE, offset });
    const open = ctx.params.open;
    const rows = answer.messages;
    const out = [
      h("p", {}, h("span", { "data-field": "total" }, fmtInt(answer.total)), " dead letter(s)",
        ctx.params.queue ? ` in ${ctx.params.queue}` : "", "."),
      table([
        ["Failed", (r) => fmtTime(r.failedAt)],
        ["Queue", (r) => link(r.queue, ["queue", r.queue]), "queue"],
        ["Partition", (r) => link(r.partition, ["messages", r.queue, r.partition]), "partition"],
        ["Group", (r) => r.consumerGroup, "group"],
        ["Error", (r) => r.errorMessage || "–", "error"],
        ["Retries", (r) => fmtInt(r.retryCount)],
        ["Transaction id", (r) => link(r.transactionId, ctx.parts, { ...ctx.params, open: r.id }), "transactionId"],
        ["Payload", (r) => h("code", {}, preview(r.data, 60)), "payload"],
        ["", (r) => dlqActions(r)],
      ], rows, { key: (r) => r.id, empty: "No dead letter." }),
      // A page the broker cut at its byte budget holds fewer rows: the next one starts
      // after them, not a whole PAGE on.
      pager(answer.total, answer.truncated ? Math.max(rows.length, 1) : PAGE, offset),
    ];
    const shown = rows.find((r) => r.id === open);
    if (shown) {
      out.unshift(h("div", { class: "detail", "data-detail": "dead-letter" },
        h("h2", {}, `Dead letter ${shown.transactionId}`, " ",
          h("button", { type: "button", class: "link", onclick: () => setParams({ open: "" }) }, "close")),
        figures([
          ["Queue / partition", `${shown.queue} / ${shown.partition}`], ["Group", shown.consumerGroup],
          ["Failed", fmtTime(shown.failedAt)], ["Error", shown.errorMessage || "–"],
          ["Message id", h("code", {}, shown.messageId || "–")], ["Offset", fmtInt(shown.offset)],
          ["DLQ id", h("code", {}, shown.id)],
        ]),
        h("h3", {}, "Payload"), h("pre", { class: "payload", "data-field": "payload" }, pretty(shown.data))));
    }
    return out;
  },
});
