// Consumer groups: every (group, queue) with its lag and state, filtered and paged here
// (the broker answers the list whole), the partitions lagging more than N seconds, and one
// group's cursors per queue. Seek and delete are in `actions.js`.

view("groups", {
  title: "Consumer groups",
  frame(ctx) {
    ctx.controls.append(searchForm([
      ["search", "Group or queue contains"],
      ["lagging", "Lagging only", { type: "checkbox", checked: ctx.params.lagging === "1" }],
      ["minLag", "Lag over (s)", { type: "number", min: "0", value: ctx.params.minLag || "60", size: 6 }],
    ], ctx.params));
  },
  async load(ctx) {
    const minLag = intParam(ctx.params, "minLag", 60, 2 ** 31 - 1);
    const [all, lagging] = await Promise.all([
      Api.get(GROUPS), Api.get(`${GROUPS}/lagging`, { minLagSeconds: minLag })]);
    const needle = (ctx.params.search || "").toLowerCase();
    let rows = all.filter((g) => !needle || g.name.toLowerCase().includes(needle)
      || g.queueName.toLowerCase().includes(needle));
    if (ctx.params.lagging === "1") rows = rows.filter((g) => g.offsetLag > 0);
    rows.sort((a, b) => a.name.localeCompare(b.name) || a.queueName.localeCompare(b.queueName));
    const offset = intParam(ctx.params, "offset", 0);
    return [
      table([
        ["Group", (g) => link(g.name, ["group", g.name]), "name"],
        ["Queue", (g) => link(g.queueName, ["queue", g.queueName]), "queue"],
        ["State", (g) => g.state, "state"],
        ["Members", (g) => fmtInt(g.members), "members"],
        ["Partitions with lag", (g) => fmtInt(g.partitionsWithLag), "partitionsWithLag"],
        ["Offset lag", (g) => fmtInt(g.offsetLag), "offsetLag"],
        ["Max time lag", (g) => fmtSeconds(g.maxTimeLag), "maxTimeLag"],
        ["Subscription", (g) => g.subscriptionMode || "–"],
        ["Conflation", (g) => (g.conflation ? "on" : "off"), "conflation"],
        ["", (g) => groupActions(g.name, g.queueName)],
      ], rows.slice(offset, offset + PAGE), { key: (g) => `${g.name}/${g.queueName}`, empty: "No consumer group matches." }),
      pager(rows.length, PAGE, offset),
      section(`Partitions lagging more than ${fmtSeconds(minLag)}: ${fmtInt(lagging.length)}`, table([
        ["Group", (r) => link(r.consumer_group, ["group", r.consumer_group])],
        ["Queue", (r) => link(r.queue_name, ["queue", r.queue_name])],
        ["Partition", (r) => link(r.partition_name, ["messages", r.queue_name, r.partition_name])],
        ["Offset lag", (r) => fmtInt(r.offset_lag), "offsetLag"],
        ["Time lag", (r) => fmtSeconds(r.time_lag_seconds)],
        ["Oldest unconsumed", (r) => fmtTime(r.oldest_unconsumed_at)],
        ["Last consumed", (r) => fmtTime(r.last_consumed_at)],
      ], lagging.slice(0, 100), { key: (r) => `${r.consumer_group}/${r.queue_name}/${r.partition_name}`,
        empty: "None." })),
    ];
  },
});

view("group", {
  title: "Consumer group",
  nav: "groups",
  async load(ctx) {
    const name = ctx.parts[1] || "";
    ctx.title.textContent = `Consumer group ${name}`;
    const [detail, all] = await Promise.all([Api.get(`${GROUPS}/${seg(name)}`), Api.get(GROUPS)]);
    // The stored conflation policy per queue (last-value delivery), from the group list.
    const conflating = new Set(all.filter((g) => g.name === name && g.conflation).map((g) => g.queueName));
    const queues = Object.keys(detail).sort();
    if (!queues.length) return h("p", { class: "empty" }, "This group has no cursor on any queue.");
    return queues.map((queue) => h("section", { "data-queue": queue },
      h("h2", {}, "Queue ", link(queue, ["queue", queue]), " ", groupActions(name, queue)),
      h("p", { "data-conflation": conflating.has(queue) ? "on" : "off" },
        `Conflation (last-value delivery): ${conflating.has(queue) ? "on" : "off"}`),
      groupPartitionsTable(detail[queue].partitions)));
  },
});
