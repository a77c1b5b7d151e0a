// Analytics over time: throughput, depth and lag per bucket, from
// GET /api/v1/status/analytics, whose series has this shape:
//   {interval, from, to, buckets: [{at, pushed, delivered, acked, failed, deadLettered,
//                                   depth, lagSeconds}]}
// A broker that answers without `buckets` (or not at all) gets a note, not an empty chart.

const INTERVALS = ["hour", "day", "week", "month"];

view("analytics", {
  title: "Analytics",
  frame(ctx) {
    const select = h("select", { name: "interval" }, INTERVALS.map((i) =>
      h("option", { value: i, selected: (ctx.params.interval || "hour") === i }, i)));
    const queue = h("input", { name: "queue", value: ctx.params.queue || "", placeholder: "all queues" });
    const form = h("form", { class: "search" }, h("label", {}, "Interval ", select), " ",
      h("label", {}, "Queue ", queue), " ", h("button", { type: "submit" }, "Apply"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setParams({ interval: select.value, queue: queue.value.trim() });
    });
    ctx.controls.append(form);
  },
  async load(ctx) {
    let answer;
    try {
      answer = await Api.get("/api/v1/status/analytics", {
        interval: ctx.params.interval || "hour", queue: ctx.params.queue });
    } catch (error) {
      if (error instanceof ApiError && error.missingRoute) return unavailable("Analytics", error);
      throw error;
    }
    if (!answer || !Array.isArray(answer.buckets)) {
      return h("div", { class: "unavailable", "data-unavailable": "Analytics" },
        h("strong", {}, "Analytics are not available on this broker yet."),
        " GET /api/v1/status/analytics answered without a series of buckets, so there is nothing to chart.");
    }
    const buckets = answer.buckets;
    if (!buckets.length) return h("p", { class: "empty", "data-buckets": "0" }, "No sample in this range yet.");
    const times = buckets.map((b) => b.at);
    const pick = (key) => buckets.map((b) => (typeof b[key] === "number" ? b[key] : null));
    return [
      h("p", { "data-buckets": String(buckets.length) },
        `${fmtInt(buckets.length)} bucket(s) from ${fmtTime(answer.from)} to ${fmtTime(answer.to)}, per ${answer.interval}.`),
      lineChart("Throughput (messages per bucket)", times, [
        { name: "pushed", values: pick("pushed") }, { name: "delivered", values: pick("delivered") },
        { name: "acked", values: pick("acked") }, { name: "failed", values: pick("failed") },
        { name: "dead-lettered", values: pick("deadLettered") },
      ], { chart: "throughput" }),
      lineChart("Depth (messages waiting)", times, [{ name: "depth", values: pick("depth") }], { chart: "depth" }),
      lineChart("Lag (seconds)", times, [{ name: "lag", values: pick("lagSeconds") }],
        { chart: "lag", format: (v) => fmtSeconds(v) }),
    ];
  },
});
