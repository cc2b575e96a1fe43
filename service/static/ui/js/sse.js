// Server-sent events from a fetch() body: the text/event-stream format
// (https://html.spec.whatwg.org/multipage/server-sent-events.html), parsed by hand because
// EventSource cannot send an API key header.

/** Split one event block into its fields; null for a block of comments only. */
export function parseEvent(block) {
  const event = { event: "message", data: "", id: null };
  const data = [];
  let seen = false;
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    seen = true;
    if (field === "data") data.push(value);
    else if (field === "event") event.event = value;
    else if (field === "id") event.id = value;
    else if (field === "retry") event.retry = Number(value);
  }
  event.data = data.join("\n");
  return seen ? event : null;
}

/** The events of a stream of bytes (a Response body), as they arrive. */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) yield event;
    }
  }
}
