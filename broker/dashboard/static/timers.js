// Pending timers (wire-protocol-extensions §16): the queues that have some (how many, the
// next due, how many failing), then one queue's timers by key with the API's keyset paging
// (`after` = the last key of the page before; `nextAfter` when truncated).

view("timers", {
  title: "Timers",
  async load(ctx) {
    const queue = ctx.parts[1];
    const after = ctx.params.after || "";
    if (queue) {
      const answer = await Api.get(`/api/v1/timers/${seg(queue)}`, { after, limit: PAGE });
      return section(`Pending timers of ${queue}`,
        table([
          ["Key", (t) => t.timerKey, "timerKey"],
          ["Partition", (t) => t.partition, "partition"],
          ["Due", (t) => fmtTime(t.deliverAt), "deliverAt"],
          ["Attempts", (t) => fmtInt(t.attempts), "attempts"],
          ["Last error", (t) => t.lastError || "–", "lastError"],
          ["Firing", (t) => (t.claimed ? "now" : "–"), "claimed"],
          ["Transaction id", (t) => t.txn, "txn"],
          ["Scheduled by", (t) => t.producerSub || "–", "producerSub"],
        ], answer.rows, { key: (t) => t.timerKey, empty: "No pending timer." }),
        keysetPager(answer, after));
    }
    const answer = await Api.get("/api/v1/timers", { after, limit: PAGE });
    return section("Queues with pending timers",
      table([
        ["Queue", (q) => link(q.queue, ["timers", q.queue]), "queue"],
        ["Pending", (q) => fmtInt(q.pending), "pending"],
        ["Next due", (q) => fmtTime(q.nextDue), "nextDue"],
        ["Failing", (q) => fmtInt(q.failing), "failing"],
      ], answer.queues, { key: (q) => q.queue, empty: "No pending timer." }),
      keysetPager(answer, after));
  },
});
