'use strict';
// Test function for the Node.js wrapper.
const { sizeOf } = require('./lib/size');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

exports.handle = async (event, request) => {
  switch (event.action) {
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
