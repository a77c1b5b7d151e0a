// Messages of one partition by offset (POST /api/v1/fetch: no lease, no cursor), a page
// at a time, and one message's detail with its payload and per-group status. Without an
// `offset` parameter the page follows the tail of the partition.

const MESSAGES_PAGE = 50;
const FETCH_BYTES = 256 * 1024;

view("messages", {
  title: "Messages",
  nav: "queues",
  async load(ctx) {
    const [, queue = "", partition = "Default"] = ctx.parts;
    ctx.title.replaceChildren("Messages of ", link(queue, ["queue", queue]), ` / ${partition}`);
    const detail = await Api.get(`/api/v1/resources/queues/${seg(queue)}`);
    const part = detail.partitions.find((p) => p.name === partition);
    if (!part) return h("p", { class: "empty" }, `Queue ${queue} has no partition ${partition}.`);
    const limit = intParam(ctx.params, "limit", MESSAGES_PAGE, 1000) || MESSAGES_PAGE;
    const tail = Math.max(part.logStart, part.lastOffset - limit + 1);
    const from = ctx.params.offset === undefined ? tail : Math.max(intParam(ctx.params, "offset", tail), part.logStart);
    const answer = await Api.post("/api/v1/fetch", {
      entries: [{ queue, partition, offset: from, maxBytes: FETCH_BYTES }] });
    const entry = answer.entries[0];
    if (entry.error) return h("p", { class: "error" }, `fetch: ${entry.error}`);
    const records = entry.records.slice(0, limit);
    const selected = ctx.params.tx;
    const nav = h("div", { class: "pager" },
      h("button", { type: "button", "data-page": "oldest", disabled: from <= entry.logStartOffset,
        onclick: () => setParams({ offset: entry.logStartOffset }) }, "« oldest"),
      h("button", { type: "button", "data-page": "prev", disabled: from <= entry.logStartOffset,
        onclick: () => setParams({ offset: Math.max(entry.logStartOffset, from - limit) }) }, "‹ older"),
      h("span", { "data-field": "range" }, records.length
        ? `offsets ${fmtInt(records[0].offset)}–${fmtInt(records[records.length - 1].offset)} of ${fmtInt(entry.logStartOffset)}–${fmtInt(entry.highWatermark - 1)}`
        : `no message from offset ${fmtInt(from)} (log ${fmtInt(entry.logStartOffset)}–${fmtInt(entry.highWatermark - 1)})`),
      h("button", { type: "button", "data-page": "next",
        disabled: !records.length || records[records.length - 1].offset >= entry.highWatermark - 1,
        onclick: () => setParams({ offset: records[records.length - 1].offset + 1 }) }, "newer ›"),
      h("button", { type: "button", "data-page": "latest", onclick: () => setParams({ offset: "" }) }, "latest »"));
    const out = [nav, table([
      ["Offset", (r) => fmtInt(r.offset), "offset"],
      ["Transaction id", (r) => link(r.transactionId, ctx.parts, { ...ctx.params, tx: r.transactionId }), "transactionId"],
      ["Created", (r) => fmtTime(r.ts)],
      ["Producer", (r) => r.producerSub || "–"],
      ["Payload", (r) => h("code", {}, preview(r.payload)), "payload"],
    ], records, { key: (r) => String(r.offset), empty: "No message in this range." })];
    if (selected) out.unshift(await messageDetail(part.id, selected));
    return out;
  },
});

async function messageDetail(partitionId, transactionId) {
  let m;
  try {
    m = await Api.get(`/api/v1/messages/${seg(partitionId)}/${seg(transactionId)}`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      return h("p", { class: "error" }, `Message ${transactionId}: ${error.text}`);
    }
    throw error;
  }
  return h("div", { class: "detail", "data-detail": "message" },
    h("h2", {}, `Message ${m.transactionId}`, " ",
      h("button", { type: "button", class: "link", onclick: () => setParams({ tx: "" }) }, "close")),
    figures([
      ["Offset", fmtInt(m.offset), "offset"], ["Status", m.status, "status"],
      ["Message id", h("code", {}, m.id), "id"], ["Created", fmtTime(m.createdAt), "created"],
      ["Producer", m.producerSub || "–", "producer"], ["Trace id", m.traceId || "–", "traceId"],
      ["Traces", link("traces of this message", ["traces"], { pid: m.partitionId, tx: m.transactionId }), "traces"],
    ]),
    table([
      ["Group", (g) => g.name], ["Status", (g) => g.status, "status"],
      ["Committed offset", (g) => fmtInt(g.committedOffset)], ["Lease", (g) => (g.leaseActive ? `until ${fmtTime(g.leaseExpiresAt)}` : "–")],
      ["Retries", (g) => fmtInt(g.retryCount)],
    ], m.consumerGroups || [], { key: (g) => g.name, empty: "No consumer group has read this partition." }),
    h("h3", {}, "Payload"), h("pre", { class: "payload", "data-field": "payload" }, pretty(m.data)));
}
