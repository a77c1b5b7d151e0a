// Analytics over time: throughput, depth and lag per bucket, from
// GET /api/v1/status/analytics, whose series has this shape:
//   {interval, from, to, queue, namespace, task, sampleIntervalMs,
//    buckets: [{at, pushed, delivered, acked, failed, deadLettered, depth, lagSeconds}]}
// Buckets hold the samples the reaper takes every sampleIntervalMs (or `stats/refresh`).

const INTERVALS = ["minute", "hour", "day", "week", "month"];
const THROUGHPUT = [["pushed", "pushed"], ["delivered", "delivered"], ["acked", "acked"],
  ["failed", "failed"], ["deadLettered", "dead-lettered"]];

function sum(buckets, key) {
  return buckets.reduce((total, b) => total + b[key], 0);
}

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
    const answer = await Api.get("/api/v1/status/analytics", {
      interval: ctx.params.interval || "hour", queue: ctx.params.queue });
    const buckets = answer.buckets;
    const range = `from ${fmtTime(answer.from)} to ${fmtTime(answer.to)}, per ${answer.interval}`;
    if (!buckets.length) {
      return h("p", { class: "empty", "data-buckets": "0" },
        `No sample ${range}. The reaper samples every ${fmtSeconds(answer.sampleIntervalMs / 1000)}.`);
    }
    const times = buckets.map((b) => b.at);
    const pick = (key) => buckets.map((b) => b[key]);
    return [
      h("p", { "data-buckets": String(buckets.length) },
        `${fmtInt(buckets.length)} bucket(s) ${range}${answer.queue ? `, queue ${answer.queue}` : ""}.`),
      figures([
        ...THROUGHPUT.map(([key, label]) => [`${label} (total)`, fmtInt(sum(buckets, key)), key]),
        ["depth (last)", fmtInt(buckets[buckets.length - 1].depth), "depth"],
        ["lag (largest)", fmtSeconds(Math.max(...pick("lagSeconds"))), "lagSeconds"],
      ]),
      lineChart("Throughput (messages per bucket)", times,
        THROUGHPUT.map(([key, name]) => ({ name, values: pick(key) })), { chart: "throughput" }),
      lineChart("Depth (messages waiting)", times, [{ name: "depth", values: pick("depth") }], { chart: "depth" }),
      lineChart("Lag (seconds)", times, [{ name: "lag", values: pick("lagSeconds") }],
        { chart: "lag", format: (v) => fmtSeconds(v) }),
    ];
  },
});
