// KV namespaces (extensions §14): live keys, value bytes and keys expiring within five
// minutes per namespace, in byte order, paged by the broker's cursor as getPrefix pages
// (`after` exclusive, `nextAfter` when there is more; READ_ONLY
// /api/v1/resources/kv-namespaces). Locks live in the namespace `queen-locks`.

const KV_PAGE = 50;

view("kv", {
  title: "KV namespaces",
  async load(ctx) {
    const after = ctx.params.after || "";
    const answer = await Api.get("/api/v1/resources/kv-namespaces", { after, limit: KV_PAGE });
    return [section("Namespaces", table([
      ["Namespace", (n) => n.ns, "ns"],
      ["Keys", (n) => fmtInt(n.keys), "keys"],
      ["Value bytes", (n) => fmtInt(n.bytes), "bytes"],
      ["Expiring within 5 min", (n) => fmtInt(n.expiringSoon), "expiring"],
    ], answer.rows, { key: (n) => n.ns,
      empty: after ? "No namespace after this one." : "No live key in any namespace." })),
    keysetPager(answer, after)];
  },
});
