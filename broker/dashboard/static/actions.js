// Actions that change state, each behind a confirmation and offered only to a role that
// may use the route (seek: read-write; deleting a group: admin; DLQ replay and delete:
// read-write). The broker checks again: a refusal shows up as an error notice.

const GROUPS = "/api/v1/consumer-groups";

function groupActions(group, queue) {
  const box = h("span", { class: "actions" });
  if (Access.can.write) {
    box.append(h("button", {
      type: "button", "data-action": "seek-end",
      onclick: async () => {
        const ok = await confirmAction("Seek to end",
          `Move consumer group "${group}" to the end of queue "${queue}"? Every message now in ` +
          "the queue counts as consumed for this group; live leases are released.", { verb: "Seek to end" });
        if (!ok) return;
        await perform(() => Api.post(`${GROUPS}/${seg(group)}/queues/${seg(queue)}/seek`, { toEnd: true }),
          (a) => `Group ${group} on ${queue}: ${a.partitionsUpdated} partition(s) moved to the end.`);
      },
    }, "Seek to end"));
    box.append(h("button", {
      type: "button", "data-action": "seek-time",
      onclick: async () => {
        const input = h("input", { type: "datetime-local", step: "1", id: "seek-time",
          value: localInputValue(new Date(Date.now() - 3600 * 1000)) });
        const ok = await confirmAction("Seek to a time",
          `Move consumer group "${group}" on queue "${queue}" to the first message created at or ` +
          "after this time (your browser's local time):", { verb: "Seek", extra: input });
        if (!ok) return;
        const when = new Date(input.value);
        if (Number.isNaN(when.getTime())) {
          notice("Seek: not a valid time.", "error");
          return;
        }
        await perform(() => Api.post(`${GROUPS}/${seg(group)}/queues/${seg(queue)}/seek`,
          { timestamp: when.toISOString() }),
        (a) => `Group ${group} on ${queue}: ${a.partitionsUpdated} partition(s) moved to ${fmtTime(a.targetTimestamp)}.`);
      },
    }, "Seek to time…"));
  }
  if (Access.can.admin) {
    box.append(h("button", {
      type: "button", class: "danger", "data-action": "delete-group",
      onclick: async () => {
        const ok = await confirmAction("Delete consumer group",
          `Delete consumer group "${group}" on queue "${queue}"? Its cursors and stored ` +
          "subscription are removed; a consumer of this group starts again from its subscription rule.",
          { verb: "Delete" });
        if (!ok) return;
        await perform(() => Api.del(`${GROUPS}/${seg(group)}/queues/${seg(queue)}`, { deleteMetadata: "true" }),
          (a) => `Group ${group} deleted on ${queue} (${a.deletedPartitions} partition cursor(s)).`);
      },
    }, "Delete"));
  }
  return box;
}

function localInputValue(date) {
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 19);
}

function dlqActions(row) {
  const box = h("span", { class: "actions" });
  if (!Access.can.write) return box;
  box.append(h("button", {
    type: "button", "data-action": "replay",
    onclick: async () => {
      const ok = await confirmAction("Replay dead letter",
        `Push the stored payload of ${row.transactionId} again to ${row.queue} / ${row.partition} ` +
        "as a new message, and remove this dead letter?", { verb: "Replay" });
      if (!ok) return;
      await perform(() => Api.post(`/api/v1/dlq/${seg(row.id)}/replay`, {}), (a) => {
        const as = a.replayedAs || {};
        return `Replayed ${row.transactionId} as ${as.transaction_id || "a new message"}` +
          (as.offset != null ? ` at offset ${as.offset}` : "") + ".";
      });
    },
  }, "Replay"));
  box.append(h("button", {
    type: "button", class: "danger", "data-action": "delete-dead-letter",
    onclick: async () => {
      const ok = await confirmAction("Delete dead letter",
        `Delete the dead letter ${row.transactionId} of ${row.queue} / ${row.partition}? ` +
        "Dead letters of the same message in other consumer groups go too. This cannot be undone.",
        { verb: "Delete" });
      if (!ok) return;
      await perform(() => Api.del(`/api/v1/messages/${seg(row.partitionId)}/${seg(row.transactionId)}`),
        () => `Dead letter ${row.transactionId} deleted.`);
    },
  }, "Delete"));
  return box;
}
