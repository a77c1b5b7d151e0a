// Queues: the list (search and paging done by the broker), and one queue's detail:
// options, partitions with offsets and last write, and the consumer groups on it with
// their lag per partition.

const PAGE = 25;
const GROUPS_SHOWN = 20;  // consumer groups detailed on a queue's page (one request each)

view("queues", {
  title: "Queues",
  frame(ctx) {
    ctx.controls.append(searchForm([["search", "Name contains"]], ctx.params));
  },
  async load(ctx) {
    const limit = intParam(ctx.params, "limit", PAGE, 1000) || PAGE;
    const offset = intParam(ctx.params, "offset", 0);
    const [answer, ephemeral] = await Promise.all([
      Api.get("/api/v1/resources/queues", { search: ctx.params.search, limit, offset }),
      Api.get("/api/v1/ephemeral/queues")]);
    return [
      table([
        ["Queue", (q) => link(q.name, ["queue", q.name]), "name"],
        ["Namespace", (q) => q.namespace],
        ["Task", (q) => q.task],
        ["Partitions", (q) => fmtInt(q.partitions), "partitions"],
        ["Messages", (q) => fmtInt(q.messages.total), "total"],
        ["Pending", (q) => fmtInt(q.messages.pending), "pending"],
        ["Processing", (q) => fmtInt(q.messages.processing), "processing"],
        ["Created", (q) => fmtTime(q.createdAt)],
      ], answer.queues, { key: (q) => q.name, empty: "No queue matches." }),
      pager(answer.total, limit, offset),
      ephemeralQueues(ephemeral, ctx.params.search || ""),
    ];
  },
});

// Ephemeral queues (§19): not paged by the broker (it lists them all), so the name search
// applies here and at most EPHEMERAL_SHOWN rows are drawn.
const EPHEMERAL_SHOWN = 200;

function ephemeralQueues(answer, search) {
  const rows = answer.queues.filter((q) => q.queue.includes(search));
  return section("Ephemeral queues",
    h("p", {}, `${fmtInt(rows.length)} of ${fmtInt(answer.count)} · bytes held deployment-wide `,
      h("span", { "data-field": "ephCellBytes" }, fmtInt(answer.cellBytes))),
    table([
      ["Queue", (q) => q.queue, "ephQueue"],
      ["Tier", (q) => q.tier, "ephTier"],
      ["Depth", (q) => fmtInt(q.depth), "ephDepth"],
      ["Bytes", (q) => fmtInt(q.bytes), "ephBytes"],
      ["Partitions", (q) => fmtInt(q.partitions), "ephPartitions"],
      ["Groups", (q) => fmtInt(q.groups), "ephGroups"],
      ["Dropped (bounds)", (q) => fmtInt(q.drops.bounds), "ephDropsBounds"],
      ["Dropped (ttl)", (q) => fmtInt(q.drops.ttl), "ephDropsTtl"],
      ["Dropped (retry)", (q) => fmtInt(q.drops.retry), "ephDropsRetry"],
      ["Bounds", (q) => `${fmtInt(q.options.maxLength)} msgs · ${fmtInt(q.options.maxBytes)} B · ${q.options.policy}`, "ephBounds"],
    ], rows.slice(0, EPHEMERAL_SHOWN), { key: (q) => q.queue, empty: "No ephemeral queue matches." }));
}

// The groups on one queue with their per-partition state (GROUPS_SHOWN at most).
async function groupsOnQueue(queue) {
  const all = await Api.get(GROUPS);
  const here = all.filter((g) => g.queueName === queue);
  const details = await Promise.all(here.slice(0, GROUPS_SHOWN).map((g) =>
    Api.get(`${GROUPS}/${seg(g.name)}`).then((d) => ({ summary: g, partitions: (d[queue] || {}).partitions || [] }))));
  return { details, more: here.length - details.length };
}

function groupPartitionsTable(partitions) {
  return table([
    ["Partition", (p) => p.partition, "partition"],
    ["Committed offset", (p) => fmtInt(p.committedOffset), "committed"],
    ["Offset lag", (p) => fmtInt(p.offsetLag), "offsetLag"],
    ["Time lag", (p) => fmtSeconds(p.timeLagSeconds), "timeLag"],
    ["Lease", (p) => (p.leaseActive ? "active" : "–"), "lease"],
    ["Worker", (p) => p.workerId || "–"],
    ["Last consumed", (p) => fmtTime(p.lastConsumedAt)],
  ], partitions, { key: (p) => p.partition, empty: "No cursor yet." });
}

view("queue", {
  title: "Queue",
  nav: "queues",
  async load(ctx) {
    const name = ctx.parts[1] || "";
    ctx.title.textContent = `Queue ${name}`;
    const [q, groups] = await Promise.all([
      Api.get(`/api/v1/resources/queues/${seg(name)}`), groupsOnQueue(name)]);
    const t = q.totals;
    const out = [figures([
      ["Namespace", q.namespace || "–", "namespace"], ["Task", q.task || "–", "task"],
      ["Messages", fmtInt(t.total), "total"], ["Pending", fmtInt(t.pending), "pending"],
      ["Processing", fmtInt(t.processing), "processing"], ["Dead letters", fmtInt(t.deadLetter), "deadLetter"],
      ["Partitions", fmtInt(t.partitions), "partitions"], ["Segments", fmtInt((q.segments || {}).segments), "segments"],
      ["Created", fmtTime(q.createdAt), "created"],
    ])];
    const limit = 50;
    const offset = intParam(ctx.params, "poffset", 0);
    out.push(section("Partitions", table([
      ["Partition", (p) => link(p.name, ["messages", name, p.name]), "name"],
      ["Log start", (p) => fmtInt(p.logStart), "logStart"],
      ["Last offset", (p) => fmtInt(p.lastOffset), "lastOffset"],
      ["Messages", (p) => fmtInt(p.stats.total), "total"],
      ["Pending", (p) => fmtInt(p.stats.pending), "pending"],
      ["Processing", (p) => fmtInt(p.stats.processing), "processing"],
      ["Dead letters", (p) => fmtInt(p.stats.deadLetter), "deadLetter"],
      ["Oldest", (p) => fmtTime(p.oldestMessage)],
      ["Last write", (p) => fmtTime(p.newestMessage), "lastWrite"],
      ["Id", (p) => h("code", {}, p.id)],
    ], q.partitions.slice(offset, offset + limit), { key: (p) => p.name, empty: "No partition yet." }),
    q.partitions.length > limit ? pager(q.partitions.length, limit, offset, "poffset") : null));
    const groupBlocks = groups.details.map(({ summary, partitions }) => h("div", { class: "group", "data-group": summary.name },
      h("h3", {}, link(summary.name, ["group", summary.name]), ` · ${summary.state} · lag ${fmtInt(summary.offsetLag)}`,
        " ", groupActions(summary.name, name)),
      groupPartitionsTable(partitions)));
    out.push(section("Consumer groups", groupBlocks.length ? groupBlocks : h("p", { class: "empty" }, "No consumer group has read this queue."),
      groups.more > 0 ? h("p", {}, `${groups.more} more group(s): see `, link("consumer groups", ["groups"], { search: name }), ".") : null));
    const options = Object.entries(q.options || {}).sort(([a], [b]) => a.localeCompare(b));
    out.push(section("Options", table([
      ["Option", ([k]) => k], ["Value", ([, v]) => JSON.stringify(v), "value"],
    ], options, { key: ([k]) => k })));
    return out;
  },
});
