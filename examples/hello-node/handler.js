'use strict';
// The hello example for the Node.js runtimes (nodejs20, nodejs22).

// event is the JSON request body; request holds the HTTP method, path, query, headers and
// traceparent. Handlers may be async.
exports.handle = async (event, request) => {
  const name = event.name || 'world';
  return { message: `hello, ${name}`, method: request.method };
};
