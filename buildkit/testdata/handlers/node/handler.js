'use strict';
// Test function for the Node.js wrapper.
const { sizeOf } = require('./lib/size');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// stream yields count chunks delay seconds apart (SSE events with sse set); it fails after
// the first with fail set.
async function* stream(event) {
  if (event.sse) yield { statusCode: 200, headers: { 'Content-Type': 'text/event-stream', 'X-Stream': 'yes' } };
  const count = event.count === undefined ? 3 : event.count;
  for (let i = 0; i < count; i++) {
    if (i) await sleep((event.delay || 0) * 1000);
    if (event.fail && i === 1) throw new Error('stream broke');
    if (event.sse) yield i % 2 === 0 ? { event: 'tick', id: String(i), data: { i } } : `line ${i}\nsecond`;
    else yield `chunk ${i}\n`;
  }
}

// readable is the same plain stream as a web ReadableStream.
function readable(event) {
  let i = 0;
  return new ReadableStream({
    async pull(controller) {
      if (i >= (event.count === undefined ? 3 : event.count)) return controller.close();
      if (i) await sleep((event.delay || 0) * 1000);
      controller.enqueue(new TextEncoder().encode(`chunk ${i++}\n`));
    },
  });
}

exports.handle = async (event, request) => {
  switch (event.action) {
    case 'stream':
      return stream(event);
    case 'astream':
      return readable(event);
    case 'text':
      return `hello ${event.name}`;
    case 'error':
      throw new Error('boom');
    case 'sleep':
      await sleep((event.seconds || 0) * 1000);
      if (event.marker) require('node:fs').writeFileSync(event.marker, 'finished');
      return { slept: event.seconds || 0 };
    case 'respond':
      return event.response;
    case 'size':
      return { bytes: sizeOf(event.data) };
    default:
      return { event, request };
  }
};
